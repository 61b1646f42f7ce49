// 16-lane fp32 vector operations for kernels written once and compiled for several instruction sets
// (attention_chunks.inc): Z16 (one AVX-512 register), Y16 (two AVX2 registers) and S16 (plain C++).
//
// Lane for lane, Z16 and Y16 perform the same IEEE operations (fma, add, mul, max, exp2_nonpos16_ps ==
// exp2_nonpos_ps), and hsum reduces the 16 lanes with one fixed tree in every variant:
//   w[i] = v[i] + v[i+8] (i < 8); x[i] = w[i] + w[i+4] (i < 4); y[i] = x[i] + x[i+2] (i < 2); y[0] + y[1],
// so a kernel built on them gives bit-identical results with either. S16 uses std::exp2 (not bit-identical to
// exp2_nonpos_ps; it serves builds without AVX2).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cpu/vec.h"
#include "core/dtype.h"

namespace mopt::cpu::vec16 {

inline constexpr int kLanes = 16;

// Plain C++ (and the reference for what each operation means).
struct S16 {
  struct V {
    float x[kLanes];
  };
  using M = uint32_t;                        // bit l set: lane l kept
  static constexpr int kChunksPerStep = 1;   // independent 16-lane chunks scored together
  static constexpr int kAccs = 4;            // 16-lane accumulators a pass-2 tile keeps in registers

  static V zero() { return set1(0.0f); }
  static V set1(float a) {
    V r;
    for (float& x : r.x) x = a;
    return r;
  }
  static V load(const float* p) {
    V r;
    for (int l = 0; l < kLanes; ++l) r.x[l] = p[l];
    return r;
  }
  static V load(const uint16_t* p) {
    V r;
    for (int l = 0; l < kLanes; ++l) r.x[l] = fp16_to_fp32(p[l]);
    return r;
  }
  static void store(float* p, V v) {
    for (int l = 0; l < kLanes; ++l) p[l] = v.x[l];
  }
  template <class F>
  static V map2(V a, V b, F f) {
    for (int l = 0; l < kLanes; ++l) a.x[l] = f(a.x[l], b.x[l]);
    return a;
  }
  static V add(V a, V b) { return map2(a, b, [](float x, float y) { return x + y; }); }
  static V sub(V a, V b) { return map2(a, b, [](float x, float y) { return x - y; }); }
  static V mul(V a, V b) { return map2(a, b, [](float x, float y) { return x * y; }); }
  static V div(V a, V b) { return map2(a, b, [](float x, float y) { return x / y; }); }
  static V max(V a, V b) { return map2(a, b, [](float x, float y) { return x > y ? x : y; }); }
  static V fma(V a, V b, V c) {  // a * b + c, one rounding
    for (int l = 0; l < kLanes; ++l) c.x[l] = std::fma(a.x[l], b.x[l], c.x[l]);
    return c;
  }
  static V exp2(V a) {  // 2^x, x <= 0
    for (float& x : a.x) x = std::exp2(x);
    return a;
  }
  static M mask(int lo, int hi) { return ((1u << hi) - 1u) & ~((1u << lo) - 1u); }  // lanes [lo, hi)
  static V zero_outside(V v, M m) { return select(m, v, zero()); }
  static V select(M m, V a, V b) {  // lanes in m from a, the others from b
    for (int l = 0; l < kLanes; ++l)
      if (!(m >> l & 1u)) a.x[l] = b.x[l];
    return a;
  }
  static float hsum(V v) {
    float w[8], x[4];
    for (int i = 0; i < 8; ++i) w[i] = v.x[i] + v.x[i + 8];
    for (int i = 0; i < 4; ++i) x[i] = w[i] + w[i + 4];
    return (x[0] + x[2]) + (x[1] + x[3]);
  }
  static V hsum16(const V* a) {  // lane k: hsum(a[k])
    V r;
    for (int k = 0; k < kLanes; ++k) r.x[k] = hsum(a[k]);
    return r;
  }
  static float hmax(V v) {
    float m = v.x[0];
    for (float x : v.x) m = x > m ? x : m;
    return m;
  }
};

#ifdef MOPT_CPU_AVX2
// Two AVX2 registers: lanes 0-7 and 8-15.
struct Y16 {
  struct V {
    __m256 lo, hi;
  };
  using M = V;                               // all-ones lanes kept
  static constexpr int kChunksPerStep = 2;   // 2 chunks x 2 heads x 2 halves = 8 FMA chains in 16 registers
  static constexpr int kAccs = 4;            // 8 registers (+ exps and V rows: at most 14 of 16)

  static V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static V set1(float a) { return {_mm256_set1_ps(a), _mm256_set1_ps(a)}; }
  static V load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static void store(float* p, V v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static V add(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static V sub(V a, V b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  static V mul(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static V div(V a, V b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
  static V max(V a, V b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  static V fma(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static V exp2(V a) { return {exp2_nonpos_ps(a.lo), exp2_nonpos_ps(a.hi)}; }
  static M mask(int lo, int hi) {
    const __m256i l0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), l1 = _mm256_add_epi32(l0, _mm256_set1_epi32(8));
    const __m256i vlo = _mm256_set1_epi32(lo - 1), vhi = _mm256_set1_epi32(hi);
    auto in = [&](__m256i l) {  // lo <= l < hi
      return _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(l, vlo), _mm256_cmpgt_epi32(vhi, l)));
    };
    return {in(l0), in(l1)};
  }
  static V zero_outside(V v, M m) { return {_mm256_and_ps(v.lo, m.lo), _mm256_and_ps(v.hi, m.hi)}; }
  static V select(M m, V a, V b) { return {_mm256_blendv_ps(b.lo, a.lo, m.lo), _mm256_blendv_ps(b.hi, a.hi, m.hi)}; }
  static float hsum(V v) {
    const __m256 w = _mm256_add_ps(v.lo, v.hi);
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
  static V hsum16(const V* a) {  // lane k: hsum(a[k])
    alignas(32) float r[kLanes];
    for (int k = 0; k < kLanes; ++k) r[k] = hsum(a[k]);
    return load(r);
  }
  static float hmax(V v) {
    const __m256 w = _mm256_max_ps(v.lo, v.hi);
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
  }
};
#endif

#ifdef MOPT_CPU_AVX512_PATHS
// One AVX-512 register. Use only where cpu_has_avx512f(), from functions compiled for avx512f.
// set1, add, sub, mul, max, fma (and V, M) are Lanes16's (vec.h).
#define MOPT_Z16 __attribute__((target("avx512f"), always_inline))
struct Z16 : Lanes16 {
  static constexpr int kChunksPerStep = 4;  // 4 chunks x 2 heads = 8 FMA chains (2 FMA pipes x 4 cycles)
  static constexpr int kAccs = 16;          // + sums, maxima, exps of 2 heads and a V row: 23 of 32 registers

  MOPT_Z16 static V zero() { return _mm512_setzero_ps(); }
  MOPT_Z16 static V load(const float* p) { return _mm512_loadu_ps(p); }
  MOPT_Z16 static V load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  MOPT_Z16 static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  MOPT_Z16 static V div(V a, V b) { return _mm512_div_ps(a, b); }
  MOPT_Z16 static V exp2(V a) { return exp2_nonpos16_ps(a); }
  MOPT_Z16 static M mask(int lo, int hi) { return static_cast<M>(((1u << hi) - 1u) & ~((1u << lo) - 1u)); }
  MOPT_Z16 static V zero_outside(V v, M m) { return _mm512_maskz_mov_ps(m, v); }
  MOPT_Z16 static V select(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  MOPT_Z16 static float hsum(V v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 w = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
  MOPT_Z16 static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  // Lane k: hsum(a[k]), the 16 trees evaluated together, each level's additions for all inputs at once.
  MOPT_Z16 static V hsum16(const V* a) {
    V t[8], u[4], v[2];
    for (int k = 0; k < 8; ++k)  // [w(a[2k]) | w(a[2k+1])], w[i] = v[i] + v[i+8]
      t[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; ++k)  // [x(a[4k]) | ... | x(a[4k+3])], x[i] = w[i] + w[i+4]
      u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * k], t[2 * k + 1], 0xDD));
    const __m512i x02 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const __m512i x13 = _mm512_add_epi32(x02, _mm512_set1_epi32(2));
    for (int k = 0; k < 2; ++k)  // [y(a[8k]) | ... | y(a[8k+7])], y[i] = x[i] + x[i+2]
      v[k] = _mm512_add_ps(_mm512_permutex2var_ps(u[2 * k], x02, u[2 * k + 1]),
                           _mm512_permutex2var_ps(u[2 * k], x13, u[2 * k + 1]));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_ps(_mm512_permutex2var_ps(v[0], even, v[1]), _mm512_permutex2var_ps(v[0], odd, v[1]));
  }
};
#endif

}  // namespace mopt::cpu::vec16
