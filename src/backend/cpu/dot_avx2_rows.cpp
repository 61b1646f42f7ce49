// AVX2 + FMA + F16C dot kernels of the formats behind the safetensors layouts GPU servers load (dot_kernels.h):
// FP8 weights x FP8 activations, INT8 and INT4_G128 weights x fp32 activations. Each weight block is decoded once
// and applied to the R activation rows.
//
// E4M3 through F16C: a code's sign bit moved to bit 15 and its 7 exponent and mantissa bits shifted left by 7 are
// an fp16 whose value is the code's times 2^-8 (same mantissa; exponent bias 15 instead of 7; E4M3 subnormals
// land on fp16 subnormals with the same factor), which _mm256_cvtph_ps converts exactly. The NaN codes (S.1111.111)
// decode as 480 instead: quantizers never write them.
#include "backend/cpu/dot_kernels.h"

#ifdef __AVX2__
#include <immintrin.h>

#include "backend/cpu/dot_q0_impl.h"
#include "backend/cpu/vec.h"

namespace mopt::cpu {

namespace {

// 16 E4M3 codes -> their values times 2^-8, elements 0..7 in lo, 8..15 in hi.
inline void e4m3x16(const uint8_t* c, __m256& lo, __m256& hi) {
  const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8),
                                    _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7F)), 7));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// ---- FP8 x FP8 ----

struct DotFP8 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockFP8* w = static_cast<const BlockFP8*>(wv);
    constexpr float kUnscale = 65536.0f;  // both operands decoded at 2^-8
    block_rows<BlockFP8, R>(act, K / kQKRow, out, os, [&](int64_t i, const auto& x, auto& acc) {
      __m256 wf[4];
      e4m3x16(w[i].qs, wf[0], wf[1]);
      e4m3x16(w[i].qs + 16, wf[2], wf[3]);
      for (int r = 0; r < R; ++r) {
        __m256 xf[4];
        e4m3x16(x[r][i].qs, xf[0], xf[1]);
        e4m3x16(x[r][i].qs + 16, xf[2], xf[3]);
        __m256 s = _mm256_mul_ps(wf[0], xf[0]);
        for (int k = 1; k < 4; ++k) s = _mm256_fmadd_ps(wf[k], xf[k], s);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(w[i].d * x[r][i].d * kUnscale), s, acc[r]);
      }
    });
  }
};

// ---- INT8 x F32 ----

// 8 signed bytes -> 8 floats.
inline __m256 s8x8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

struct DotINT8 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockINT8* w = static_cast<const BlockINT8*>(wv);
    block_rows<float, R>(act, K / kQKRow, out, os, [&](int64_t i, const auto& x, auto& acc) {
      __m256 wf[4];
      for (int k = 0; k < 4; ++k) wf[k] = s8x8(w[i].qs + 8 * k);
      const __m256 d = _mm256_set1_ps(w[i].d);
      for (int r = 0; r < R; ++r) {
        const float* xb = x[r] + i * kQKRow;
        __m256 s = _mm256_mul_ps(wf[0], _mm256_loadu_ps(xb));
        for (int k = 1; k < 4; ++k) s = _mm256_fmadd_ps(wf[k], _mm256_loadu_ps(xb + 8 * k), s);
        acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
      }
    });
  }
};

// ---- INT4_G128 x F32 ----

// 8 codes (bytes 0..15) minus the zero point -> 8 floats.
inline __m256 u8x8_minus(__m128i bytes8, __m256i z) {
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes8), z));
}

struct DotINT4 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockINT4_G128* w = static_cast<const BlockINT4_G128*>(wv);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    block_rows<float, R>(act, K / kQKGroup, out, os, [&](int64_t i, const auto& x, auto& acc) {
      const __m256i z = _mm256_set1_epi32(w[i].z);
      __m256 s[R];
      for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_ps();
      for (int p = 0; p < 4; ++p) {  // bytes 16p..16p+15: elements 16p.. (low nibbles) and 64+16p.. (high nibbles)
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].qs + 16 * p));
        const __m128i lo = _mm_and_si128(raw, m4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
        const __m256 q[4] = {u8x8_minus(lo, z), u8x8_minus(_mm_srli_si128(lo, 8), z), u8x8_minus(hi, z),
                             u8x8_minus(_mm_srli_si128(hi, 8), z)};
        const int64_t e[4] = {16 * p, 16 * p + 8, 64 + 16 * p, 64 + 16 * p + 8};
        for (int r = 0; r < R; ++r) {
          const float* xb = x[r] + i * kQKGroup;
          for (int k = 0; k < 4; ++k) s[r] = _mm256_fmadd_ps(q[k], _mm256_loadu_ps(xb + e[k]), s[r]);
        }
      }
      const __m256 d = _mm256_set1_ps(h2f(w[i].d));
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(d, s[r], acc[r]);
    });
  }
};

}  // namespace

namespace dot_avx2 {
const DotSet fp8 = kSet<DotFP8>;
const DotSet int8 = kSet<DotINT8>;
const DotSet int4_g128 = kSet<DotINT4>;
}  // namespace dot_avx2

}  // namespace mopt::cpu
#endif  // __AVX2__
