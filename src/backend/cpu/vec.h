// Small fp32 vector primitives shared by the CPU kernels (AVX2+FMA with a scalar fallback).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cpu/isa.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// GCC 12 reports the AVX-512 intrinsics' internal _mm512_undefined_*() operands as "(may be) used uninitialized"
// once they are inlined into exp16_ps and friends (GCC bug 105593, fixed in GCC 13): a false positive.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define MOPT_CPU_AVX2 1
#endif

namespace mopt::cpu {

#ifdef MOPT_CPU_AVX2
inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#endif

// Coefficients of the polynomials of vec_exp.inc: e^r ~ 1 + r + r^2 (kExpPoly[0] + kExpPoly[1] r + ... + kExpPoly[5]
// r^5) for |r| <= ln2/2, and 2^r ~ kExp2Poly[0] + ... + kExp2Poly[6] r^6 (Taylor: ln2^k / k!) for |r| <= 1/2.
inline constexpr float kExpPoly[6] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                      8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
inline constexpr float kExp2Poly[7] = {1.0f, 0.693147180559945f, 0.240226506959101f, 0.0555041086648216f,
                                       0.00961812910762848f, 0.00133335581464284f, 0.000154035303933816f};

#ifdef MOPT_CPU_AVX2
// The operations vec_exp.inc is written in, on 8 lanes (AVX2).
struct Lanes8 {
  using V = __m256;
  using M = __m256;  // lane mask: all ones where true
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }    // a * b + c
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static M less(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  // p * 2^n for integral n in [-127, 128], 0 in the lanes of `zero`: two products by powers of two that are normal
  // floats (n split in halves), exact but for the last, which rounds only a subnormal result.
  static V scale_pow2(M zero, V p, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(zero, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
  }
  // The same for n in [-126, 0], where 2^n is a normal float: one product, rounded once.
  static V scale_pow2_nonpos(M zero, V p, V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_andnot_ps(zero, _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23))));
  }
};
namespace lanes8 {
using L = Lanes8;
#define MOPT_LANES
#include "backend/cpu/vec_exp.inc"
#undef MOPT_LANES
}  // namespace lanes8

// exp(x): relative error ~2e-7 over [-87, 88]; 0 below -87, +inf above 88.
inline __m256 exp_ps(__m256 x) { return lanes8::exp_lanes(x); }
// 2^x for x <= 0 (softmax weights in base 2: the attention kernel's scores are pre-scaled by log2(e)): relative
// error ~2e-7; 0 below -126 (and for -inf). Fewer operations than exp_ps.
inline __m256 exp2_nonpos_ps(__m256 x) { return lanes8::exp2_nonpos_lanes(x); }
#endif

#if defined(MOPT_CPU_AVX2) && defined(__GNUC__)
#define MOPT_CPU_AVX512_PATHS 1
// True where the CPU (and OS) support AVX-512F; kernels with 512-bit variants pick them at run time.
// The AVX-512 path (isa.h) is active: the CPU has it and MOPT_CPU_ISA / set_isa() did not lower the path.
inline bool cpu_has_avx512f() { return isa_active() >= DotIsa::kAvx512; }

#define MOPT_AVX512 __attribute__((target("avx512f"), always_inline))
// The operations of vec_exp.inc on 16 lanes (AVX-512F): lane for lane the IEEE operations of Lanes8. p * 2^n is
// one vscalefps, which rounds the exact product once, as Lanes8's power-of-two products do: the same bits.
struct Lanes16 {
  using V = __m512;
  using M = __mmask16;
  MOPT_AVX512 static V set1(float a) { return _mm512_set1_ps(a); }
  MOPT_AVX512 static V add(V a, V b) { return _mm512_add_ps(a, b); }
  MOPT_AVX512 static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  MOPT_AVX512 static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  MOPT_AVX512 static V min(V a, V b) { return _mm512_min_ps(a, b); }
  MOPT_AVX512 static V max(V a, V b) { return _mm512_max_ps(a, b); }
  MOPT_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  MOPT_AVX512 static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  MOPT_AVX512 static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  MOPT_AVX512 static M less(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  MOPT_AVX512 static V scale_pow2(M zero, V p, V n) { return _mm512_maskz_scalef_ps(static_cast<M>(~zero), p, n); }
  MOPT_AVX512 static V scale_pow2_nonpos(M zero, V p, V n) { return scale_pow2(zero, p, n); }
};
namespace lanes16 {
using L = Lanes16;
#define MOPT_LANES __attribute__((target("avx512f")))
#include "backend/cpu/vec_exp.inc"
#undef MOPT_LANES
}  // namespace lanes16
#undef MOPT_AVX512

// exp_ps and exp2_nonpos_ps on 16 lanes, bit-identical to them. Call only where cpu_has_avx512f().
__attribute__((target("avx512f"))) inline __m512 exp16_ps(__m512 x) { return lanes16::exp_lanes(x); }
__attribute__((target("avx512f"))) inline __m512 exp2_nonpos16_ps(__m512 x) { return lanes16::exp2_nonpos_lanes(x); }
#endif

// x[i] = exp(x[i] - sub) for i < n; returns the sum. x must have room for n rounded up to 8 (the padding
// is overwritten). exp(-inf) = 0. The sum adds 8-lane groups in order, then reduces with hsum_ps.
inline float vec_exp_sub_sum(float* x, int n, float sub) {
  float sum = 0.0f;
#ifdef MOPT_CPU_AVX2
  const int n8 = (n + 7) & ~7;
  for (int i = n; i < n8; ++i) x[i] = -INFINITY;
  const __m256 vs = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  for (int i = 0; i < n8; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum_ps(acc);
#else
  for (int i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - sub));
  for (int i = n; i < ((n + 7) & ~7); ++i) x[i] = 0.0f;  // the padding, as the vector path leaves it
#endif
  return sum;
}

#ifdef MOPT_CPU_AVX512_PATHS
// vec_exp_sub_sum with 16 exps per instruction and the same 8-lane summation order: bit-identical results.
// Call only where cpu_has_avx512f().
__attribute__((target("avx512f"))) inline float vec_exp_sub_sum_avx512(float* x, int n, float sub) {
  const int n8 = (n + 7) & ~7;
  for (int i = n; i < n8; ++i) x[i] = -INFINITY;
  const __m512 vs = _mm512_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n8; i += 16) {
    const __m512 e = exp16_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  if (i < n8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(sub)));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  return hsum_ps(acc);
}
#endif

inline float vec_dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.0f;
#ifdef MOPT_CPU_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  s = hsum_ps(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void vec_scale(float* y, float c, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  const __m256 vc = _mm256_set1_ps(c);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(vc, _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] *= c;
}

}  // namespace mopt::cpu
