// AVX2 + FMA + F16C dot kernels (see dot_kernels.h). Compiled only when __AVX2__ is defined.
// Each kernel walks one weight row once and applies every weight block to R activation rows, so for
// batched inputs a weight block is decoded once per R rows.
//
// Integer products use _mm256_maddubs_epi16 (u8 x s8 -> pairwise s16 sums) then _mm256_madd_epi16 to s32.
// Signed weights (Q8_0, Q5_0 - 16) go through the sign trick: |w| * (x * sign(w)). Unsigned K-quant, Q4_0 and Q5_1
// codes feed maddubs directly, and their offsets (mins, -32, -8) are applied through the activations' block sums.
#include "backend/cpu/dot_kernels.h"

#ifdef __AVX2__
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/vec.h"
#include "backend/cpu/dot_q0_impl.h"

namespace mopt::cpu {

namespace {

// ---- Q4_K / Q5_K x Q8_K ----

// The 8 6-bit scales and mins of a Q4_K/Q5_K super-block (see scale_min_k4), 4 bytes at a time.
inline void unpack_scales_k4(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t lo6 = 0x3F3F3F3Fu, lo4 = 0x0F0F0F0Fu, lo2 = 0x03030303u;
  const uint32_t s03 = u[0] & lo6, m03 = u[1] & lo6;
  const uint32_t s47 = (u[2] & lo4) | (((u[0] >> 6) & lo2) << 4);
  const uint32_t m47 = ((u[2] >> 4) & lo4) | (((u[1] >> 6) & lo2) << 4);
  std::memcpy(sc, &s03, 4);
  std::memcpy(sc + 4, &s47, 4);
  std::memcpy(mn, &m03, 4);
  std::memcpy(mn + 4, &m47, 4);
}

template <bool kQ5>
struct DotK45 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const uint8_t* wb = static_cast<const uint8_t*>(wv);
    constexpr size_t kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc_min[R];  // the mins' part (8 partial sums per row), subtracted at the end
    for (int r = 0; r < R; ++r) acc_min[r] = _mm256_setzero_ps();
    block_rows<BlockQ8_K, R>(act, K / kQKK, out, os, [&](int64_t i, const auto& x, auto& acc) {
      const uint8_t* blk = wb + i * kBytes;
      uint16_t d16, dmin16;
      std::memcpy(&d16, blk, 2);
      std::memcpy(&dmin16, blk + 2, 2);
      const uint8_t* scales = blk + 4;
      const uint8_t* qh = kQ5 ? blk + 16 : nullptr;
      const uint8_t* qs = kQ5 ? blk + 48 : blk + 16;
      uint8_t sc[8], mn[8];
      unpack_scales_k4(scales, sc, mn);
      // mins as [m0, m0, m1, m1, ...] s16 so that madd with bsums gives m_j * (bsum[2j] + bsum[2j+1]).
      const __m128i mn8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
      const float d = h2f(d16), dmin = h2f(dmin16);
      // The 8 scales as s16 in both 128-bit lanes; scale k is broadcast from there by one byte shuffle.
      const __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
      const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kQ5) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      __m256i sumi[R];
      for (int r = 0; r < R; ++r) sumi[r] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (kQ5) {
          const __m256i blo = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
          const __m256i bhi = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
          const __m256i sixteen = _mm256_set1_epi8(16);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, blo), blo), sixteen));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bhi), bhi), sixteen));
        }
        const __m256i s_lo = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * 2 * c)));
        const __m256i s_hi =
            _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * c + 1))));
        for (int r = 0; r < R; ++r) {
          const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 64 * c));
          const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 64 * c + 32));
          const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), s_lo);
          const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), s_hi);
          sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(pl, ph));
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].bsums));
        const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins16));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r][i].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        acc_min[r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * x[r][i].d), msum, acc_min[r]);
      }
    });
    for (int r = 0; r < R; ++r) out[r * os] -= hsum_ps(acc_min[r]);
  }
};

// ---- Q6_K x Q8_K ----

struct DotQ6_K {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockQ6_K* w = static_cast<const BlockQ6_K*>(wv);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03), m30 = _mm256_set1_epi8(0x30);
    block_rows<BlockQ8_K, R>(act, K / kQKK, out, os, [&](int64_t i, const auto& x, auto& acc) {
      const int8_t* sc = w[i].scales;
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
      __m256i sumi[R];
      for (int r = 0; r < R; ++r) {  // the -32 offset: -32 * sum_k sc[k] * bsum[k]
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].bsums));
        sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
      }
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc));
      for (int h = 0; h < 2; ++h) {
        // Scales 8h..8h+7 as s16 in both 128-bit lanes; each part's pair is picked from there by one byte shuffle.
        const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
        const uint8_t* ql = w[i].ql + 64 * h;
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h));
        __m256i q[4];  // 6-bit codes (0..63) of elements 128h + 32p + l
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        for (int p = 0; p < 4; ++p) {
          // Elements 0..15 of the part use scale sc[8h+2p], 16..31 use sc[8h+2p+1] (128-bit lanes of the s16 sums).
          const __m128i pick_lo = _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * 2 * p));
          const __m128i pick_hi = _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (2 * p + 1)));
          const __m256i s = _mm256_shuffle_epi8(sch, _mm256_set_m128i(pick_hi, pick_lo));
          for (int r = 0; r < R; ++r) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 128 * h + 32 * p));
            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[p], xv), s));
          }
        }
      }
      const float d = h2f(w[i].d);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r][i].d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    });
  }
};

// ---- Q5_1 x Q8_0 ----

// sum_i (d q_i + m) dx xq_i = d dx sum(q xq) + m dx sum(xq): unsigned codes feed maddubs directly, and sum(xq)
// comes from maddubs with ones.
struct DotQ5_1 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockQ5_1* w = static_cast<const BlockQ5_1*>(wv);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    block_rows<BlockQ8_0, R>(act, K / kQK0, out, os, [&](int64_t i, const auto& x, auto& acc) {
      const __m256i q = load_q5_codes(w[i]);
      const float d = h2f(w[i].d), m = h2f(w[i].m);
      for (int r = 0; r < R; ++r) {
        const __m256i xv = load_q8_0(x[r][i]);
        const __m256 qx = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones16));
        const __m256 sx = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xv), ones16));
        const float dx = act.d[r * act.d_stride + i];
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * dx), qx, acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(m * dx), sx, acc[r]);
      }
    });
  }
};

// ---- F32 / F16 / BF16 x F32 ----

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p, std::false_type /*f16*/) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const uint16_t* p, std::true_type /*bf16*/) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

struct F32W {
  using T = float;
  static __m256 load(const float* p) { return load8(p); }
  static float one(float v) { return v; }
};
struct F16W {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) { return load8(p, std::false_type{}); }
  static float one(uint16_t v) { return h2f(v); }
};
struct BF16W {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) { return load8(p, std::true_type{}); }
  static float one(uint16_t v) { return bf16_to_fp32(v); }
};

template <class W>
struct DotFloat {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const typename W::T* w = static_cast<const typename W::T*>(wv);
    const float* x[R];
    row_ptrs(act, x);
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m256 w0 = W::load(w + k), w1 = W::load(w + k + 8);
      for (int r = 0; r < R; ++r) {
        acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + k), acc0[r]);
        acc1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r] + k + 8), acc1[r]);
      }
    }
    if (k + 8 <= K) {
      const __m256 w0 = W::load(w + k);
      for (int r = 0; r < R; ++r) acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r] + k), acc0[r]);
      k += 8;
    }
    for (int r = 0; r < R; ++r) {
      float s = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));
      for (int64_t j = k; j < K; ++j) s += W::one(w[j]) * x[r][j];
      out[r * os] = s;
    }
  }
};

}  // namespace

namespace dot_avx2 {
const DotSet f32 = kSet<DotFloat<F32W>>;
const DotSet f16 = kSet<DotFloat<F16W>>;
const DotSet bf16 = kSet<DotFloat<BF16W>>;
const DotSet q8_0 = kSet<DotQ0<BlockQ8_0, load_q8_0, DotMaddubs>>;
const DotSet q4_0 = kSet<DotQ4_0U<Dot2Maddubs>>;
const DotSet q4_k = kSet<DotK45<false>>;
const DotSet q5_k = kSet<DotK45<true>>;
const DotSet q6_k = kSet<DotQ6_K>;
const DotSet q5_0 = kSet<DotQ0<BlockQ5_0, load_q5_0, DotMaddubs>>;
const DotSet q5_1 = kSet<DotQ5_1>;
}  // namespace dot_avx2

}  // namespace mopt::cpu
#endif  // __AVX2__
