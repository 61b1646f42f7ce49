// Q8_0 / Q4_0 / Q5_0 weight x Q8_0 activation kernels and the helpers of every SIMD kernel file, shared by the
// AVX2 (dot_avx2.cpp, dot_avx2_rows.cpp) and AVX-VNNI (dot_vnni.cpp) builds: the file including it picks the integer
// dot policy and the target ISA. Everything here has internal linkage, so the instruction-set variants never merge
// at link time.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec.h"

namespace mopt::cpu {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// The kernel set of a kernel family: K::rows<R> handles R activation rows, R = 1..kDotRows (each instruction set's
// file names its kernels through it).
static_assert(kDotRows == 4, "kSet lists one kernel per row count");
template <class K>
constexpr DotSet kSet = {{K::template rows<1>, K::template rows<2>, K::template rows<3>, K::template rows<4>}};

template <class A, int R>
inline void row_ptrs(const ActRows& act, const A* (&x)[R]) {
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const A*>(static_cast<const uint8_t*>(act.data) + r * act.stride);
}

// The frame of a kernel that walks its weight row one block at a time: the R activation rows as A pointers, R fp32
// accumulators, and their horizontal sums into out[r * os]. block(i, x, acc) adds the products of weight block i
// (of nb) with the R activation rows x[0..R) to acc[0..R); it is inlined, so the loop compiles as if written out.
template <class A, int R, class Block>
[[gnu::always_inline]] inline void block_rows(const ActRows& act, int64_t nb, float* out, int64_t os, Block&& block) {
  const A* x[R];
  row_ptrs(act, x);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) block(i, x, acc);
  for (int r = 0; r < R; ++r) out[r * os] = hsum_ps(acc[r]);
}

// 8 s32 partial sums of w . x for 32 s8 weights (|w| precomputed) and 32 s8 activations (sign trick).
struct DotMaddubs {
  static __m256i dot(__m256i abs_w, __m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  }
};

inline __m256i load_q8_0(const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }

// 32 bits -> 32 bytes, byte i = 0xFF where bit i is set (byte i of the u32 picked into lane i / 8, then its bit
// i % 8 tested).
inline __m256i bits_to_bytes(const uint8_t* bits4) {
  uint32_t u;
  std::memcpy(&u, bits4, 4);
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  // lane 0: bytes 0, 1
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3); // lane 1: bytes 2, 3
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(u)), pick), bit);
  return _mm256_cmpeq_epi8(v, bit);
}

// The 32 5-bit codes of a Q5_0 / Q5_1 block (0..31): nibbles as Q4_0, plus 16 where the qh bit is set.
template <class B>
inline __m256i load_q5_codes(const B& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m256i lo4 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
  return _mm256_or_si256(lo4, _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(16)));
}

// Q5_0 codes as s8 in [-16, 15].
inline __m256i load_q5_0(const BlockQ5_0& b) { return _mm256_sub_epi8(load_q5_codes(b), _mm256_set1_epi8(16)); }

// Q8_0 / Q5_0 weights (blocks WB; Load: __m256i(const WB&), its 32 codes as s8) x Q8_0 activations; Dot:
// the integer dot policy.
template <class WB, auto Load, class Dot>
struct DotQ0 {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const WB* w = static_cast<const WB*>(wv);
    const BlockQ8_0* x[R];
    row_ptrs(act, x);
    const int64_t nb = K / kQK0;
    const float* xd[R];  // [R][nb] activation block scales
    for (int r = 0; r < R; ++r) xd[r] = act.d + r * act.d_stride;
    __m256 acc0[R], acc1[R];
    for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {  // two blocks per step: independent FMA chains
      const __m256i w0 = Load(w[i]), w1 = Load(w[i + 1]);
      const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
      const __m256 d0 = _mm256_set1_ps(h2f(w[i].d)), d1 = _mm256_set1_ps(h2f(w[i + 1].d));
      for (int r = 0; r < R; ++r) {
        const __m256i p0 = Dot::dot(a0, w0, load_q8_0(x[r][i]));
        const __m256i p1 = Dot::dot(a1, w1, load_q8_0(x[r][i + 1]));
        acc0[r] = _mm256_fmadd_ps(_mm256_mul_ps(d0, _mm256_broadcast_ss(xd[r] + i)), _mm256_cvtepi32_ps(p0), acc0[r]);
        acc1[r] =
            _mm256_fmadd_ps(_mm256_mul_ps(d1, _mm256_broadcast_ss(xd[r] + i + 1)), _mm256_cvtepi32_ps(p1), acc1[r]);
      }
    }
    for (; i < nb; ++i) {
      const __m256i w0 = Load(w[i]);
      const __m256i a0 = _mm256_sign_epi8(w0, w0);
      const __m256 d0 = _mm256_set1_ps(h2f(w[i].d));
      for (int r = 0; r < R; ++r) {
        const __m256i p0 = Dot::dot(a0, w0, load_q8_0(x[r][i]));
        acc0[r] = _mm256_fmadd_ps(_mm256_mul_ps(d0, _mm256_broadcast_ss(xd[r] + i)), _mm256_cvtepi32_ps(p0), acc0[r]);
      }
    }
    for (int r = 0; r < R; ++r) out[r * os] = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));
  }
};

// ---- Q4_0 x Q8_0, codes unsigned ----
// Q4_0 codes q are 0..15 for the value q - 8. These kernels feed q to the integer dot as the unsigned operand and
// take the offset out through the activation blocks' code sums (ActRows::s):
//   w . x = sum_i d_w[i] d_x[i] (sum_j q_ij x_ij - 8 sum_j x_ij).
// Two blocks share a register: the low nibbles (elements 0..15) of blocks i and i + 1 in one, their high nibbles
// (elements 16..31) in the other, against the matching halves of the activation blocks. Scales are converted 8
// blocks at a time. Against DotQ0 this drops the -8 and both sign operations, and halves the nibble unpacking.

// 8 s32 partial sums of wl . xl + wh . xh (u8 codes x s8 activations; |sums| <= 2 * 2 * 15 * 128, no saturation).
struct Dot2Maddubs {
  static __m256i dot2(__m256i wl, __m256i xl, __m256i wh, __m256i xh) {
    const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(wl, xl), _mm256_maddubs_epi16(wh, xh));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  }
};

// Bytes [0, 16) of lo in the low half, of hi in the high half.
inline __m256i load_halves(const void* lo, const void* hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(lo))),
                                 _mm_loadu_si128(static_cast<const __m128i*>(hi)), 1);
}

// The fp16 scales of 8 consecutive Q4_0 blocks as fp32.
inline __m256 q4_0_scales8(const BlockQ4_0* b) {
  __m128i v = _mm_cvtsi32_si128(b[0].d);
  v = _mm_insert_epi16(v, b[1].d, 1);
  v = _mm_insert_epi16(v, b[2].d, 2);
  v = _mm_insert_epi16(v, b[3].d, 3);
  v = _mm_insert_epi16(v, b[4].d, 4);
  v = _mm_insert_epi16(v, b[5].d, 5);
  v = _mm_insert_epi16(v, b[6].d, 6);
  v = _mm_insert_epi16(v, b[7].d, 7);
  return _mm256_cvtph_ps(v);
}

// Dot: the integer dot policy, Dot::dot2(wl, xl, wh, xh) as Dot2Maddubs.
template <class Dot>
struct DotQ4_0U {
  template <int R>
  static void rows(const void* wv, const ActRows& act, int64_t K, float* out, int64_t os) {
    const BlockQ4_0* w = static_cast<const BlockQ4_0*>(wv);
    const BlockQ8_0* x[R];
    row_ptrs(act, x);
    const int64_t nb = K / kQK0;
    const float* xd[R];  // [R][nb] activation block scales
    const float* xs[R];  // [R][nb] activation block code sums
    for (int r = 0; r < R; ++r) {
      xd[r] = act.d + r * act.d_stride;
      xs[r] = act.s + r * act.d_stride;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[R], off[R];  // off: sum_i d_w d_x (sum of x's codes), 8 blocks a lane group
    for (int r = 0; r < R; ++r) acc[r] = off[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
      const __m256 dw = q4_0_scales8(w + i);
      __m256 d[R];  // d_w d_x of the 8 blocks
      for (int r = 0; r < R; ++r) {
        d[r] = _mm256_mul_ps(dw, _mm256_loadu_ps(xd[r] + i));
        off[r] = _mm256_fmadd_ps(d[r], _mm256_loadu_ps(xs[r] + i), off[r]);
      }
      for (int p = 0; p < 4; ++p) {  // blocks i + 2p (low half) and i + 2p + 1 (high half)
        const BlockQ4_0* b = w + i + 2 * p;
        const __m256i raw = load_halves(b[0].qs, b[1].qs);
        const __m256i wl = _mm256_and_si256(raw, m4), wh = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        const __m256i sel = _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
        for (int r = 0; r < R; ++r) {
          const BlockQ8_0* a = x[r] + i + 2 * p;
          const __m256i xl = load_halves(a[0].qs, a[1].qs), xh = load_halves(a[0].qs + 16, a[1].qs + 16);
          acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::dot2(wl, xl, wh, xh)), _mm256_permutevar8x32_ps(d[r], sel),
                                   acc[r]);
        }
      }
    }
    float off_tail[R] = {};
    for (; i < nb; ++i) {  // the last nb % 8 blocks, one at a time
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].qs));
      const __m128i m = _mm_set1_epi8(0x0F);
      const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
      const float dw = h2f(w[i].d);
      for (int r = 0; r < R; ++r) {
        const __m256i s = Dot::dot2(q, load_q8_0(x[r][i]), _mm256_setzero_si256(), _mm256_setzero_si256());
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * xd[r][i]), acc[r]);
        off_tail[r] += dw * xd[r][i] * xs[r][i];
      }
    }
    for (int r = 0; r < R; ++r) out[r * os] = hsum_ps(acc[r]) - 8.0f * (hsum_ps(off[r]) + off_tail[r]);
  }
};

}  // namespace
}  // namespace mopt::cpu
