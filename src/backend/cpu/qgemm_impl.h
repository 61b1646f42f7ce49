// The interleaved Q4_0 / Q8_0 tile kernels of qgemm.h, written once over a vector policy V and instantiated per
// instruction set (qgemm_avx2.cpp: V256<false>, qgemm_vnni.cpp: V256<true>, qgemm_avx512.cpp: V512), each file
// compiling it for its own target. Everything here has internal linkage and calls no out-of-line library code, so
// no instruction-set variant can be merged into another at link time.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <utility>

#include "backend/cpu/qgemm.h"

namespace mopt::cpu {
namespace {

// V: I (integer register), F (fp32 register), L (lanes = rows per register), load (4 bytes of each of L rows),
// bcast (4 activation codes to every lane), lo / hi (nibbles), dot4 / join4 / finish4 (acc += 4-code dots of codes
// <= 15, two such sums added, then the block's sums as s32), prep8 / dot8 (the same for 8-bit codes stored + 128, s32
// sums), add32, scales (L fp16 -> fp32), store (the first n lanes).

// Q4_0 group-blocks: 8 registers of codes per half, t = 0..3 low nibbles of chunk t, 4..7 high nibbles of chunk t-4.
struct FmtQ4 {
  using Pairs = QPairs<true>;
  template <class V>
  static auto codes(const uint8_t* q, int t) {
    const typename V::I v = V::load(q + 64 * (t & 3));
    return t < 4 ? V::lo(v) : V::hi(v);
  }
  template <class V, class W>
  static typename V::I dot(typename V::I acc, const W& w, typename V::I x) { return V::dot4(acc, w, x); }
  template <class V>
  static typename V::I finish(typename V::I acc) { return V::finish4(acc); }
  template <class V>
  static typename V::I join(typename V::I a, typename V::I b) { return V::join4(a, b); }
};

// Q8_0 group-blocks: chunk t holds codes 4t..4t+3 (+ 128).
struct FmtQ8 {
  using Pairs = QPairs<false>;
  template <class V>
  static auto codes(const uint8_t* q, int t) { return V::prep8(V::load(q + 64 * t)); }
  template <class V, class W>
  static typename V::I dot(typename V::I acc, const W& w, typename V::I x) { return V::dot8(acc, w, x); }
  template <class V>
  static typename V::I finish(typename V::I acc) { return acc; }
  template <class V>
  static typename V::I join(typename V::I a, typename V::I b) { return V::add32(a, b); }
};

// Block i of one group (its scales and codes at g) against R tokens (codes x[r], block scale and offset term xd[r][i],
// xo[r][i]): acc[h][r] += the block's dot for rows h * V::L.. of the group. Per code register of each half of V::L
// rows, one broadcast of 4 codes per token serves both halves; then the fp32 epilogue of qgemm.h per half and token.
template <class V, class Fmt, int R>
inline void block(const uint8_t* g, int64_t i, const int8_t* const* x, const float* const* xd, const float* const* xo,
                  typename V::F (&acc)[kQGroup / V::L][R]) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int H = kQGroup / V::L;
  const uint8_t* q = Fmt::Pairs::codes(g, i);
  for (int64_t o = 0; o < Fmt::Pairs::kCodes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(q + kQPrefetch + o), _MM_HINT_T0);
  // One token: two chains of integer dots per half (even and odd code registers), so that a block's dots are not
  // one chain of 8 dependent instructions; the sums are exact, so the result is the same.
  constexpr int C = R == 1 ? 2 : 1;
  I iacc[C][H][R];
  for (int c = 0; c < C; ++c)
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < R; ++r) iacc[c][h][r] = V::zero();
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    decltype(Fmt::template codes<V>(q, t)) w[H];
    for (int h = 0; h < H; ++h) w[h] = Fmt::template codes<V>(q + 4 * V::L * h, t);
    for (int r = 0; r < R; ++r) {
      const I b = V::bcast(x[r] + 32 * i + 4 * t);
      for (int h = 0; h < H; ++h) {
        iacc[t % C][h][r] = Fmt::template dot<V>(iacc[t % C][h][r], w[h], b);
        V::pin(iacc[t % C][h][r]);
      }
    }
  }
  for (int h = 0; h < H; ++h) {
    const F dw = V::scales(Fmt::Pairs::scales(g, i) + 2 * V::L * h);
    for (int r = 0; r < R; ++r) {
      I sum = iacc[0][h][r];
      if constexpr (C == 2) sum = Fmt::template join<V>(sum, iacc[1][h][r]);
      const F dot = V::cvt(Fmt::template finish<V>(sum));
      acc[h][r] = V::fmadd(dw, V::fmadd(V::set1(xd[r][i]), dot, V::set1(xo[r][i])), acc[h][r]);
    }
  }
}

// The first n rows of a group's R outputs (y + r * ldy + j for row j).
template <class V, int R>
inline void store_group(const typename V::F (&acc)[kQGroup / V::L][R], float* y, int64_t ldy, int n) {
  for (int h = 0; h < kQGroup / V::L; ++h) {
    const int left = n - V::L * h;
    if (left <= 0) break;
    for (int r = 0; r < R; ++r) V::store(y + r * ldy + V::L * h, acc[h][r], left);
  }
}

// R tokens x one group (16 rows), the whole row.
template <class V, class Fmt, int R>
void tile(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  typename V::F acc[kQGroup / V::L][R];
  for (auto& row : acc)
    for (auto& v : row) v = V::fzero();
  const int8_t* x[R];
  const float* xd[R];
  const float* xo[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.qs + (m + r) * a.K;
    xd[r] = a.d + (m + r) * a.nb;
    xo[r] = a.o + (m + r) * a.nb;
  }
  for (int64_t i = 0; i < a.nb; ++i) block<V, Fmt, R>(g, i, x, xd, xo, acc);
  store_group<V, R>(acc, y, ldy, valid);
}

// One token (row 0 of a) x two groups, block i of each in turn (QPairFn): each group's chain of operations is the
// one tile<V, Fmt, 1> runs.
template <class V, class Fmt>
void tile_pair(const uint8_t* const* g, const QAct& a, float* const* y, const int* valid) {
  typename V::F acc[2][kQGroup / V::L][1];
  for (auto& group : acc)
    for (auto& row : group) row[0] = V::fzero();
  const int8_t* const x[1] = {a.qs};
  const float* const xd[1] = {a.d};
  const float* const xo[1] = {a.o};
  for (int64_t i = 0; i < a.nb; ++i) {
    block<V, Fmt, 1>(g[0], i, x, xd, xo, acc[0]);
    block<V, Fmt, 1>(g[1], i, x, xd, xo, acc[1]);
  }
  store_group<V, 1>(acc[0], y[0], 0, valid[0]);
  store_group<V, 1>(acc[1], y[1], 0, valid[1]);
}

template <class V, class Fmt, int N>
constexpr QGemmSet make_set(int offset) {
  QGemmSet s = qgemm_set_of<N>(offset, [](auto r) { return &tile<V, Fmt, r>; });
  s.pair = &tile_pair<V, Fmt>;
  return s;
}

// 256-bit lanes: 8 rows per register, two halves per group. kVnni: vpdpbusd (AVX-VNNI); else maddubs + madd, and
// Q8_0 through the sign trick (its codes back to s8 once per register: |w| and sign(x, w)).
template <bool kVnni>
struct V256 {
  using I = __m256i;
  using F = __m256;
  static constexpr int L = 8;
  static I zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  // An accumulator as the compiler must leave it: each dot is added in program order. Without it, GCC re-associated
  // a block's chain of (exact) integer adds into a tree whose 16 products spilled to the stack (16 ymm registers).
  static void pin(I& v) { asm("" : "+x"(v)); }
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I bcast(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static I lo(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  static I hi(I v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
  // VNNI: s32 sums. Else s16 sums, widened by finish4: a block's 8 registers add at most 8 * 2 * 15 * 127 = 30480.
  static I dot4(I acc, I u, I x) {
    if constexpr (kVnni) {
      return _mm256_dpbusd_avx_epi32(acc, u, x);
    } else {
      return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, x));
    }
  }
  static I join4(I a, I b) { return kVnni ? _mm256_add_epi32(a, b) : _mm256_add_epi16(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I finish4(I acc) {
    if constexpr (kVnni) {
      return acc;
    } else {
      return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
    }
  }
  struct W8 {  // VNNI: the unsigned codes; else |w| and w as s8
    I a, s;
  };
  static W8 prep8(I u) {
    if constexpr (kVnni) {
      return {u, u};
    } else {
      const I s = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
      return {_mm256_abs_epi8(s), s};
    }
  }
  static I dot8(I acc, const W8& w, I x) {
    if constexpr (kVnni) {
      return _mm256_dpbusd_avx_epi32(acc, w.a, x);
    } else {  // |pair sums| <= 2 * 127 * 127
      const I p16 = _mm256_maddubs_epi16(w.a, _mm256_sign_epi8(x, w.s));
      return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    }
  }
  static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // K-quants (qgemm_k_impl.h). VNNI: sub-block dots in s32, scaled by vpmulld; else s16 sums scaled by madd with the
  // scale in both s16 halves of a lane.
  static constexpr bool kS16 = !kVnni;
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I orand(I a, I b, I m) { return _mm256_or_si256(a, _mm256_and_si256(b, m)); }
  static I set8(char c) { return _mm256_set1_epi8(c); }
  template <int S>
  static I shr16(I v) { return _mm256_srli_epi16(v, S); }
  static I pairs(const uint8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <int E>
  static I scale(I p) {
    if constexpr (kVnni) {
      return E == 0 ? _mm256_srai_epi32(_mm256_slli_epi32(p, 16), 16) : _mm256_srai_epi32(p, 16);
    } else {  // bytes 2E, 2E + 1 of each lane into both halves
      const int b = 0x01000100 + 0x02020202 * E, l = 0x04040404;
      return _mm256_shuffle_epi8(p, _mm256_setr_epi32(b, b + l, b + 2 * l, b + 3 * l, b, b + l, b + 2 * l, b + 3 * l));
    }
  }
  static I fold(I isum, I sub, I sc) {
    if constexpr (kVnni) {
      return _mm256_add_epi32(isum, _mm256_mullo_epi32(sub, sc));
    } else {
      return _mm256_add_epi32(isum, _mm256_madd_epi16(sub, sc));
    }
  }
  static I pdot(I acc, I a, I b) {
    if constexpr (kVnni) {
      return _mm256_dpwssd_avx_epi32(acc, a, b);
    } else {
      return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    }
  }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  template <int S>
  static I shl32(I v) { return _mm256_slli_epi32(v, S); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* y, F v, int n) {
    if (n >= L) return _mm256_storeu_ps(y, v);
    const I mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(y, mask, v);
  }
};

}  // namespace
}  // namespace mopt::cpu
