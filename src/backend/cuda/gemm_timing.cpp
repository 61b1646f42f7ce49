// Gemm::time_cold_l2 (gemm.h): how the tuner times candidate launches of one GEMM as a decode step runs them.
#include <algorithm>
#include <limits>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/plan_choice.h"

namespace mopt::cuda {

// Cold-L2 timing: in a decode step each weight matrix is read once, with all the others read in between, so
// every timed launch follows a read of kFlushBytes that evicts the L2 (back-to-back repeats of a 33 MB matrix
// would largely hit the 50 MB L2 and misrank the tilings). A read, not a memset: a memset leaves the L2 full of
// dirty lines whose write-back the timed kernel would pay for (it misranked the tilings of the short qkv and
// o GEMMs; docs/cuda.md, "Fused decode"). Without memory for the buffer (a KV cache sized to the limit): warm
// timing.
// Each candidate is timed as a chain of kChain (sweep, launch) pairs between two events, minus the same chain of
// sweeps alone, divided by kChain: the launch runs as in a decode step (after another kernel, its PDL prologue
// overlapping that kernel's tail) and per-event noise is averaged away. kRounds rounds, every candidate once per
// round (drifting clocks touch them alike), ranked by the median: tilings of one shape are often within a
// microsecond of each other, and timing single launches between events misranked them (docs/cuda.md). After the
// first round only the candidates within kScreenRatio of the fastest (and the kScreenKeep fastest) are timed
// again (keep_after_first_round): a quantized format has up to 50 tilings, most of them far off for a shape, and
// a model's first start spent most of its tuning on them.
Result<std::vector<float>> Gemm::time_cold_l2(int n, const std::function<cudaError_t(int)>& launch,
                                              cudaStream_t stream) {
  constexpr size_t kFlushBytes = size_t{96} << 20;
  if (!flush_ && !flush_failed_ && cudaMalloc(&flush_, kFlushBytes) != cudaSuccess) {
    cudaGetLastError();  // clear the allocation error
    flush_ = nullptr;
    flush_failed_ = true;
  }
  constexpr int kRounds = 5, kChain = 8, kScreenKeep = 8;
  constexpr float kScreenRatio = 1.5f, kScreenSlackUs = 1.f;
  const int base = n;  // index of the sweeps-only chain
  std::vector<char> ok(static_cast<size_t>(n), 1);
  std::vector<char> again(static_cast<size_t>(n), 1);  // timed in the rounds after the first
  for (int c = 0; c < n; ++c) ok[c] = launch(c) == cudaSuccess;  // warm-up (and first-launch costs)
  std::vector<cudaEvent_t> ev(2 * (static_cast<size_t>(n) + 1), nullptr);
  cudaError_t err = cudaSuccess;
  for (cudaEvent_t& e : ev)
    if (err == cudaSuccess) err = cudaEventCreate(&e);
  std::vector<std::vector<float>> ms(static_cast<size_t>(n) + 1);
  for (int r = 0; r < kRounds && err == cudaSuccess; ++r) {
    for (int c = 0; c <= base && err == cudaSuccess; ++c) {
      if (c != base && (!ok[c] || !again[c])) continue;
      err = cudaEventRecord(ev[2 * c], stream);
      for (int i = 0; i < kChain && err == cudaSuccess; ++i) {
        if (flush_) err = launch_read_sweep(flush_, kFlushBytes, stream);
        if (err == cudaSuccess && c != base && launch(c) != cudaSuccess) ok[c] = 0;
      }
      if (err == cudaSuccess) err = cudaEventRecord(ev[2 * c + 1], stream);
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    for (int c = 0; c <= base && err == cudaSuccess; ++c) {
      if (c != base && (!ok[c] || !again[c])) continue;
      float x = 0.f;
      err = cudaEventElapsedTime(&x, ev[2 * c], ev[2 * c + 1]);
      ms[c].push_back(x);
    }
    if (r == 0 && err == cudaSuccess && n > kScreenKeep) {
      std::vector<float> first(static_cast<size_t>(n), std::numeric_limits<float>::infinity());
      for (int c = 0; c < n; ++c)
        if (ok[c]) first[c] = (ms[c][0] - ms[base][0]) * 1000.f / kChain;
      again = keep_after_first_round(first, kScreenRatio, kScreenSlackUs, kScreenKeep);
    }
  }
  for (cudaEvent_t e : ev)
    if (e) cudaEventDestroy(e);
  MOPT_CUDA_TRY(err);
  auto median_ms = [&](std::vector<float>& x) {  // of the rounds that timed it (1 or kRounds)
    std::nth_element(x.begin(), x.begin() + x.size() / 2, x.end());
    return x[x.size() / 2];
  };
  const float base_ms = median_ms(ms[base]);
  std::vector<float> us(static_cast<size_t>(n), std::numeric_limits<float>::infinity());
  for (int c = 0; c < n; ++c)
    if (ok[c] && !ms[c].empty()) us[c] = (median_ms(ms[c]) - base_ms) * 1000.f / kChain;
  return us;
}

}  // namespace mopt::cuda
