// Packed fp32 matmul for batches: y[M, N] = x[M, K] · W^T with W repacked once into panels of kPanel output
// rows stored k-major ([n_panels][K][kPanel], the last panel zero-padded). A micro-kernel keeps an
// MR tokens x NP panels block of outputs in registers and, per k, broadcasts MR activations against NP*kPanel
// weights: the weights of a panel are read once per MR tokens and no horizontal sums are needed.
//
// Every output is one fixed expression, y[m][n] = fma(x[m][K-1], w[n][K-1], ... fma(x[m][0], w[n][0], 0)),
// whatever MR, NP, the tiling or the thread count, so a token's result does not depend on the batch around it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

constexpr int64_t kMBlock = 16;     // tokens per work item
constexpr int64_t kPanelGroup = 4;  // panels per work item

#ifdef MOPT_CPU_AVX2
static_assert(kPackedPanel == 16, "the AVX2 micro-kernel holds a panel in two registers");

// y[MR rows, NP panels] for panels starting at wp (consecutive panels kPanel*K floats apart); `valid` outputs
// of the last panel are stored (the rest is padding).
template <int MR, int NP>
void micro(const float* wp, int64_t K, const float* x, int64_t x_stride, float* y, int64_t y_stride, int valid) {
  __m256 acc[MR][NP][2];
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p][0] = acc[m][p][1] = _mm256_setzero_ps();
  const int64_t pstride = K * kPackedPanel;
  for (int64_t k = 0; k < K; ++k) {
    __m256 w[NP][2];
    for (int p = 0; p < NP; ++p) {
      w[p][0] = _mm256_loadu_ps(wp + p * pstride + k * kPackedPanel);
      w[p][1] = _mm256_loadu_ps(wp + p * pstride + k * kPackedPanel + 8);
    }
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * x_stride + k);
      for (int p = 0; p < NP; ++p) {
        acc[m][p][0] = _mm256_fmadd_ps(xv, w[p][0], acc[m][p][0]);
        acc[m][p][1] = _mm256_fmadd_ps(xv, w[p][1], acc[m][p][1]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p) {
      float* yo = y + m * y_stride + p * kPackedPanel;
      if (p < NP - 1 || valid == kPackedPanel) {
        _mm256_storeu_ps(yo, acc[m][p][0]);
        _mm256_storeu_ps(yo + 8, acc[m][p][1]);
      } else {
        alignas(32) float tmp[kPackedPanel];
        _mm256_store_ps(tmp, acc[m][p][0]);
        _mm256_store_ps(tmp + 8, acc[m][p][1]);
        std::memcpy(yo, tmp, sizeof(float) * static_cast<size_t>(valid));
      }
    }
}
#else
template <int MR, int NP>
void micro(const float* wp, int64_t K, const float* x, int64_t x_stride, float* y, int64_t y_stride, int valid) {
  const int64_t pstride = K * kPackedPanel;
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p) {
      const int nv = p < NP - 1 ? static_cast<int>(kPackedPanel) : valid;
      for (int j = 0; j < nv; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc = std::fma(x[m * x_stride + k], wp[p * pstride + k * kPackedPanel + j], acc);
        y[m * y_stride + p * kPackedPanel + j] = acc;
      }
    }
}
#endif

using MicroFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int);

#if defined(MOPT_CPU_AVX2) && defined(__GNUC__)
#define MOPT_PACKED_AVX512 1
// The same micro-kernel with one 512-bit register per panel (chosen at run time where the CPU has AVX-512F):
// the same FMAs lane for lane, so its results are bit-identical to the AVX2 kernel's; only NP*MR may grow to 16.
template <int MR, int NP>
__attribute__((target("avx512f"))) void micro512(const float* wp, int64_t K, const float* x, int64_t x_stride,
                                                   float* y, int64_t y_stride, int valid) {
  __m512 acc[MR][NP];
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_ps();
  const int64_t pstride = K * kPackedPanel;
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_ps(wp + p * pstride + k * kPackedPanel);
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * x_stride + k]);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_fmadd_ps(xv, w[p], acc[m][p]);
    }
  }
  const __mmask16 last = static_cast<__mmask16>((1u << valid) - 1u);
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p)
      _mm512_mask_storeu_ps(y + m * y_stride + p * kPackedPanel, p < NP - 1 ? __mmask16(0xFFFF) : last, acc[m][p]);
}
#endif

// Outputs [m0, m0+mr) x panels [p0, p1) with the widest kernel whose accumulators and weights fit the 16 registers.
// With AVX-512 the 3- and 4-row blocks take up to 4 panels at once (16 accumulators in 32 registers); 1- and
// 2-row blocks keep the AVX2 kernels, which already run 8 independent chains.
void run_rows(const PackedF32& w, const float* x, int64_t mr, int64_t m0, int64_t p0, int64_t p1, float* y,
              bool avx512) {
  static constexpr MicroFn k4[] = {micro<4, 1>};
  static constexpr MicroFn k3[] = {micro<3, 1>};
  static constexpr MicroFn k2[] = {micro<2, 1>, micro<2, 2>};
  static constexpr MicroFn k1[] = {micro<1, 1>, micro<1, 2>, micro<1, 3>, micro<1, 4>};
  const MicroFn* fns = mr == 4 ? k4 : mr == 3 ? k3 : mr == 2 ? k2 : k1;
  int64_t widest = mr >= 3 ? 1 : mr == 2 ? 2 : 4;
#ifdef MOPT_PACKED_AVX512
  static constexpr MicroFn z4[] = {micro512<4, 1>, micro512<4, 2>, micro512<4, 3>, micro512<4, 4>};
  static constexpr MicroFn z3[] = {micro512<3, 1>, micro512<3, 2>, micro512<3, 3>, micro512<3, 4>};
  if (avx512 && mr >= 3) fns = mr == 4 ? z4 : z3, widest = 4;
#else
  (void)avx512;
#endif
  const int64_t K = w.K, N = w.N;
  for (int64_t p = p0; p < p1;) {
    const int64_t np = std::min(widest, p1 - p);
    const int valid = static_cast<int>(std::min<int64_t>(kPackedPanel, N - (p + np - 1) * kPackedPanel));
    fns[np - 1](w.data.data() + p * K * kPackedPanel, K, x + m0 * K, K, y + m0 * N + p * kPackedPanel, N, valid);
    p += np;
  }
}

}  // namespace

PackedF32 pack_f32(std::span<const PackSource> parts) {
  PackedF32 out;
  pack_f32(parts, out);
  return out;
}

void pack_f32(std::span<const PackSource> parts, PackedF32& out) {
  MOPT_CHECK(!parts.empty(), "pack_f32: no matrices");
  out.N = 0;
  out.K = parts[0].K;
  for (const PackSource& s : parts) {
    MOPT_CHECK(s.K == out.K && s.K > 0 && s.N > 0 && s.w, "pack_f32: matrices must share K > 0 (got %lld, %lld)",
               static_cast<long long>(s.K), static_cast<long long>(out.K));
    out.N += s.N;
  }
  const int64_t n_panels = (out.N + kPackedPanel - 1) / kPackedPanel;
  out.data.assign(static_cast<size_t>(n_panels * out.K * kPackedPanel), 0.0f);
  int64_t n = 0;  // output row in the concatenation
  for (const PackSource& s : parts)
    for (int64_t r = 0; r < s.N; ++r, ++n) {
      float* dst = out.data.data() + (n / kPackedPanel) * out.K * kPackedPanel + n % kPackedPanel;
      const float* src = s.w + r * s.K;
      for (int64_t k = 0; k < out.K; ++k) dst[k * kPackedPanel] = src[k];
    }
}

bool matmul_packed_has_avx512() {
#ifdef MOPT_PACKED_AVX512
  return cpu_has_avx512f();
#else
  return false;
#endif
}

void matmul_packed(const PackedF32& w, const float* x, int64_t M, float* y, ThreadPool* pool, bool allow_avx512) {
  MOPT_CHECK(M >= 0 && w.N > 0 && w.K > 0, "matmul_packed: empty weights or negative M");
  if (M == 0) return;
  const bool avx512 = allow_avx512 && matmul_packed_has_avx512();
  const int64_t n_panels = (w.N + kPackedPanel - 1) / kPackedPanel;
  const int64_t groups = (n_panels + kPanelGroup - 1) / kPanelGroup;
  const int64_t mblocks = (M + kMBlock - 1) / kMBlock;
  parallel_items(pool, groups * mblocks, [&](int64_t item, int) {
    const int64_t g = item % groups, mb = item / groups;
    const int64_t p0 = g * kPanelGroup, p1 = std::min(n_panels, p0 + kPanelGroup);
    const int64_t m1 = std::min(M, (mb + 1) * kMBlock);
    for (int64_t m = mb * kMBlock; m < m1; m += 4) run_rows(w, x, std::min<int64_t>(4, m1 - m), m, p0, p1, y, avx512);
  });
}

}  // namespace mopt::cpu
