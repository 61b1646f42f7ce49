// Sampling on the GPU: greedy argmax, or temperature + top-k / top-p / min-p with a per-row seed.
// One CTA per row. The three filters become one threshold on the temperature-scaled logit z = (l - max) / T:
//   min-p keeps z >= ln(min_p);  top-k keeps the largest threshold with at least k tokens above it;
//   top-p keeps the largest threshold whose kept probability mass is >= top_p.
// Each filter is computed on the full distribution and the kept set is their intersection (the highest of the
// thresholds). Thresholds for top-k/top-p are found by bisection (32 steps: resolution ~1e-8 in z), so exact
// ties at the boundary keep all tied tokens. The token is then drawn by inverse CDF over the kept set in
// vocabulary order, with u from a counter-based hash of the row's seed (reproducible, independent of launch).
// A row's token mask (a grammar's allowed ids) makes the disallowed ids -inf logits before all of this, so the
// filters and greedy see only allowed ids.
#include "backend/cuda/kernels.h"

namespace mopt::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr float kZFloor = -87.f;  // exp(-87) ~ 1.6e-38: below this nothing counts

__device__ float block_reduce(float v, bool is_max, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch reuse across calls
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : (is_max ? -INFINITY : 0.f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  return scratch[32];
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p) {
  __shared__ float scratch[33];
  __shared__ float chunk_sum[kThreads];
  const int row = blockIdx.x;
  const float* l = p.logits + static_cast<int64_t>(row) * p.n_vocab;
  const int V = p.n_vocab;
  const float temp = p.temperature ? p.temperature[row] : 0.f;
  const int top_k = p.top_k ? p.top_k[row] : 0;
  // The row's mask (null: every id allowed); a disallowed id reads as a -inf logit everywhere below.
  const int mask_at = p.mask_row ? p.mask_row[row] : -1;
  const uint64_t* mask = mask_at >= 0 ? p.masks + static_cast<int64_t>(mask_at) * ((V + 63) / 64) : nullptr;
  auto lv = [&](int i) { return !mask || ((mask[i >> 6] >> (i & 63)) & 1ull) ? l[i] : -INFINITY; };

  // Max (and its lowest index, for greedy).
  float mx = -INFINITY;
  int arg = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = lv(i);
    if (v > mx) {
      mx = v;
      arg = i;
    }
  }
  const float gmax = block_reduce(mx, true, scratch);
  __shared__ int s_arg;
  if (threadIdx.x == 0) s_arg = 0x7fffffff;
  __syncthreads();
  if (mx == gmax) atomicMin(&s_arg, arg);
  __syncthreads();
  if (!(temp > 0.f) || top_k == 1 || !isfinite(gmax)) {
    if (threadIdx.x == 0) p.tokens[row] = s_arg == 0x7fffffff ? 0 : s_arg;
    return;
  }
  const float inv_t = 1.f / temp;
  auto z_of = [&](int i) { return (lv(i) - gmax) * inv_t; };

  float tau = kZFloor;
  const float min_p = p.min_p ? p.min_p[row] : 0.f;
  if (min_p > 0.f) tau = fmaxf(tau, logf(min_p));
  if (top_k > 0 && top_k < V) {
    float lo = kZFloor, hi = 0.f;  // count(z >= lo) >= k holds; find the largest such lo
    for (int it = 0; it < 32; ++it) {
      const float mid = 0.5f * (lo + hi);
      float cnt = 0.f;
      for (int i = threadIdx.x; i < V; i += kThreads) cnt += z_of(i) >= mid ? 1.f : 0.f;
      if (block_reduce(cnt, false, scratch) >= static_cast<float>(top_k)) lo = mid;
      else hi = mid;
    }
    tau = fmaxf(tau, lo);
  }
  const float top_p = p.top_p ? p.top_p[row] : 1.f;
  if (top_p < 1.f) {
    float tot = 0.f;
    for (int i = threadIdx.x; i < V; i += kThreads) tot += __expf(z_of(i));
    const float total = block_reduce(tot, false, scratch);
    float lo = kZFloor, hi = 0.f;  // mass(z >= lo) >= top_p * total holds
    for (int it = 0; it < 32; ++it) {
      const float mid = 0.5f * (lo + hi);
      float m = 0.f;
      for (int i = threadIdx.x; i < V; i += kThreads) {
        const float z = z_of(i);
        m += z >= mid ? __expf(z) : 0.f;
      }
      if (block_reduce(m, false, scratch) >= top_p * total) lo = mid;
      else hi = mid;
    }
    tau = fmaxf(tau, lo);
  }
  tau = fminf(tau, 0.f);  // the max token always stays

  // Inverse CDF over the kept set in vocabulary order: thread t owns the contiguous range [t*C, (t+1)*C).
  const int C = (V + kThreads - 1) / kThreads;
  const int b0 = threadIdx.x * C, b1 = min(V, b0 + C);
  float mine = 0.f;
  for (int i = b0; i < b1; ++i) {
    const float z = z_of(i);
    mine += z >= tau ? __expf(z) : 0.f;
  }
  chunk_sum[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {  // serial scan of 1024 partial sums: a few microseconds, once per row
    const uint64_t h = mix64(p.seeds[row]);
    float total = 0.f;
    for (int t = 0; t < kThreads; ++t) total += chunk_sum[t];
    const float u = static_cast<float>((h >> 11) * (1.0 / 9007199254740992.0)) * total;
    float acc = 0.f;
    int t = 0;
    for (; t < kThreads - 1 && acc + chunk_sum[t] <= u; ++t) acc += chunk_sum[t];
    scratch[0] = acc;
    scratch[1] = u;
    reinterpret_cast<int*>(scratch)[2] = t;
  }
  __syncthreads();
  if (threadIdx.x == reinterpret_cast<int*>(scratch)[2]) {
    float acc = scratch[0];
    const float u = scratch[1];
    int pick = -1;
    for (int i = b0; i < b1; ++i) {
      const float z = z_of(i);
      if (z < tau) continue;
      pick = i;  // last kept token so far (guards rounding at the end of the range)
      acc += __expf(z);
      if (acc > u) break;
    }
    p.tokens[row] = pick >= 0 ? pick : s_arg;
  }
}

}  // namespace

cudaError_t launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.n_rows <= 0) return cudaSuccess;
  if (p.n_vocab <= 0 || (p.temperature && !p.seeds) || (p.mask_row && !p.masks)) return cudaErrorInvalidValue;
  sample_kernel<<<p.n_rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mopt::cuda
