// Small fp32 vector primitives shared by the CPU kernels (AVX2+FMA with a scalar fallback).
#pragma once

#include <cmath>
#include <cstdint>

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

// exp(x) for a vector, relative error ~2e-7 over [-87, 88]; below -87 returns 0, above 88 returns +inf.
// Range reduction x = n*ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), degree-6 polynomial for e^r.
inline __m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(x, hi);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 128]; split n = n1 + n2 so each factor stays a normal float (x near 88.7).
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
  p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_andnot_ps(underflow, p);
}
#endif

// 2^x for x <= 0 (softmax weights in base 2: the attention kernel's scores are pre-scaled by log2(e)): relative
// error ~2e-7; 0 below -126 (and for -inf). n = round(x), r = x - n (exact, |r| <= 1/2), 2^r by its degree-6
// Taylor polynomial (coefficients ln2^k / k!), then times 2^n. Fewer operations than exp_ps (no clamp from
// above, no multiply by log2(e), no split of ln2).
inline constexpr float kExp2Poly[7] = {1.0f, 0.693147180559945f, 0.240226506959101f, 0.0555041086648216f,
                                       0.00961812910762848f, 0.00133335581464284f, 0.000154035303933816f};
#ifdef MOPT_CPU_AVX2
inline __m256 exp2_nonpos_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.0f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(kExp2Poly[6]);
  for (int k = 5; k >= 0; --k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExp2Poly[k]));
  // 2^n, n in [-126, 0]: a normal float; the product is rounded once (a subnormal result only for n = -126).
  const __m256 sn = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, sn));
}
#endif

#if defined(MOPT_CPU_AVX2) && defined(__GNUC__)
#define MOPT_CPU_AVX512_PATHS 1
// True where the CPU (and OS) support AVX-512F; kernels with 512-bit variants pick them at run time.
inline bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// exp_ps on 16 lanes: the same operations lane for lane up to 2^n, which vscalefps applies with the same
// result (see below), so bit-identical results.
__attribute__((target("avx512f"))) inline __m512 exp16_ps(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.3762626647949f), lo = _mm512_set1_ps(-87.3365447504f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(x, hi);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // p * 2^n in one instruction: the exact product rounded once, as exp_ps's two exact power-of-two products
  // (only a subnormal result rounds, in the last of them), so the bits agree.
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), p, n);
}
#endif

#ifdef MOPT_CPU_AVX512_PATHS
// exp2_nonpos_ps on 16 lanes: the same operations lane for lane, 2^n applied by vscalefps (the same once-rounded
// product), so bit-identical results.
__attribute__((target("avx512f"))) inline __m512 exp2_nonpos16_ps(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-126.0f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[6]);
  for (int k = 5; k >= 0; --k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExp2Poly[k]));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), p, n);
}
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

// y = y * c + a * x
inline void vec_scale_axpy(float* y, float c, float a, const float* x, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  const __m256 vc = _mm256_set1_ps(c), va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_mul_ps(vc, _mm256_loadu_ps(y + i))));
#endif
  for (; i < n; ++i) y[i] = y[i] * c + a * x[i];
}

// y += a * x
inline void vec_axpy(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
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
