// The interleaved K-quant tile kernels (layout: qgemm_k.h), written once over the vector policy V of qgemm_impl.h and
// instantiated per instruction set next to the Q4_0 / Q8_0 ones. Internal linkage only (see qgemm_impl.h).
//
// V additions: kS16 (sub-block dots summed in s16: maddubs, folded every L.s16_regs code registers), and_ / orand
// (a | b & m) / set8 / shl16<S> / shr16<S>, pairs (an int8 pair plane -> s16 pairs per lane), scale<E> (sub-block
// 2k + E's scale per lane, in the form fold takes), fold (isum += sub-block sum * scale), pdot (acc += pairs . pairs),
// sub32, shl32<S>, mul.
#pragma once

#include <utility>

#include "backend/cpu/qgemm_impl.h"
#include "backend/cpu/qgemm_k.h"
#include "core/formats/formats.h"

namespace mopt::cpu {
namespace {

template <int N, class Fn>
inline void static_for(Fn&& f) {
  [&]<int... Is>(std::integer_sequence<int, Is...>) { (f(std::integral_constant<int, Is>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

// nib | the high-plane bits at bit P (B of them) moved to bits 4.. of each byte.
template <class V, int P, int B>
inline typename V::I with_high_bits(typename V::I nib, typename V::I hb) {
  typename V::I v = hb;
  if constexpr (P < 4) v = V::template shl16<4 - P>(hb);
  if constexpr (P > 4) v = V::template shr16<P - 4>(hb);
  return V::orand(nib, v, V::set8(static_cast<char>(((1 << B) - 1) << 4)));
}

// Code registers c[0..kCodeRegs) of sub-block s, group n of them (layout: qgemm_k.h), from the group-block g and
// this half's byte offset hoff within a 64-byte load: register u = n * kCodeRegs + q holds elements 4u..4u+3.
// Q4_K / Q5_K: a group is one nibble load (its low and its high nibbles, with the high plane hb's bits); Q6_K: the
// three 6-bit loads, the fourth register gathered from their top bits.
template <const QKLayout& L>
inline constexpr int kCodeRegs = L.six() ? 4 : 2;
template <class V, const QKLayout& L, int n>
inline void sub_codes(const uint8_t* g, int s, int64_t hoff, typename V::I hb, typename V::I* c) {
  if constexpr (L.six()) {
    const typename V::I l0 = V::load(g + L.six_load(s, 0) + hoff), l1 = V::load(g + L.six_load(s, 1) + hoff),
                        l2 = V::load(g + L.six_load(s, 2) + hoff), m6 = V::set8(63);
    c[0] = V::and_(l0, m6);
    c[1] = V::and_(l1, m6);
    c[2] = V::and_(l2, m6);
    const typename V::I top = V::and_(V::template shr16<6>(l0), V::set8(3));
    c[3] = V::orand(V::orand(top, V::template shr16<4>(l1), V::set8(12)), V::template shr16<2>(l2), V::set8(48));
  } else {
    const typename V::I v = V::load(g + L.nib(s, n) + hoff);
    c[0] = V::lo(v);
    c[1] = V::hi(v);
    if constexpr (L.hbits > 0) {
      c[0] = with_high_bits<V, 2 * L.hbits * n, L.hbits>(c[0], hb);
      c[1] = with_high_bits<V, 2 * L.hbits * n + L.hbits, L.hbits>(c[1], hb);
    }
  }
}

// R tokens x one group (16 rows), the whole row; per super-block and half of V::L rows: the sub-blocks' integer dots
// scaled into isum, the min term into imin, then the fp32 epilogue of qgemm_k.h.
template <class V, const QKLayout& L, int R>
void ktile(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int H = kQGroup / V::L, CR = kCodeRegs<L>, NG = L.sub / 4 / CR;  // code registers: NG groups of CR
  constexpr int kFold = V::kS16 ? L.s16_regs : L.sub / 4;                         // code registers per fold
  F acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = V::fzero();
  const int8_t* x[R];
  const float* xd[R];
  const uint32_t* xs[R];
  for (int r = 0; r < R; ++r) {
    x[r] = a.qs + (m + r) * a.K;
    xd[r] = a.d + (m + r) * a.nb;
    xs[r] = a.sums + (m + r) * a.nb * 8;
  }
  for (int64_t i = 0; i < a.nb; ++i, g += L.bytes) {
    for (int64_t o = 0; o < L.bytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(g + kQPrefetch + o), _MM_HINT_NTA);
    for (int h = 0; h < H; ++h) {
      const int64_t hoff = 4 * V::L * h;  // this half's bytes in a 64-byte load
      I isum[R];
      for (int r = 0; r < R; ++r) isum[r] = V::zero();
      for (int k = 0; k < L.subs() / 2; ++k) {
        const I P = V::pairs(g + L.sc + 32 * k + 2 * V::L * h);
        static_for<2>([&](auto E) {
          const int s = 2 * k + E;
          const I sc = V::template scale<E>(P);
          I hb = V::zero();
          if constexpr (L.hbits == 1) hb = V::load(g + L.hi(s) + hoff);
          I sub[R];
          for (int r = 0; r < R; ++r) sub[r] = V::zero();
          static_for<NG>([&](auto n) {
            I c[CR];
            sub_codes<V, L, n>(g, s, hoff, hb, c);
            static_for<CR>([&](auto q) {
              constexpr int u = n * CR + q;
              for (int r = 0; r < R; ++r)
                sub[r] = V::dot4(sub[r], c[q], V::bcast(x[r] + kQKK * i + L.sub * s + 4 * u));
              if constexpr ((u + 1) % kFold == 0) {
                for (int r = 0; r < R; ++r) {
                  isum[r] = V::fold(isum[r], sub[r], sc);
                  sub[r] = V::zero();
                }
              }
            });
          });
        });
      }
      I imin[R];
      for (int r = 0; r < R; ++r) imin[r] = V::zero();
      for (int k = 0; k < L.min_pairs(); ++k) {
        const I mp = V::pairs(g + L.mn + 32 * k + 2 * V::L * h);
        for (int r = 0; r < R; ++r)
          imin[r] = V::pdot(imin[r], mp, V::bcast(reinterpret_cast<const int8_t*>(xs[r] + 8 * i + k)));
      }
      const F dw = V::scales(g + L.d + 2 * V::L * h);
      if constexpr (L.dmin) {
        const F dm = V::scales(g + L.dm + 2 * V::L * h);
        for (int r = 0; r < R; ++r) {
          const F t1 = V::mul(V::set1(xd[r][i]), V::cvt(isum[r]));
          const F t2 = V::mul(V::set1(-xd[r][i]), V::cvt(imin[r]));
          acc[h][r] = V::fmadd(dm, t2, V::fmadd(dw, t1, acc[h][r]));
        }
      } else {
        for (int r = 0; r < R; ++r) {
          const I t = V::sub32(isum[r], V::template shl32<5>(imin[r]));
          acc[h][r] = V::fmadd(dw, V::mul(V::set1(xd[r][i]), V::cvt(t)), acc[h][r]);
        }
      }
    }
  }
  for (int h = 0; h < H; ++h) {
    const int n = valid - V::L * h;
    if (n <= 0) break;
    for (int r = 0; r < R; ++r) V::store(y + r * ldy + V::L * h, acc[h][r], n);
  }
}

template <class V, const QKLayout& L, int N>
constexpr QGemmSet make_kset() {
  return qgemm_set_of<N>(0, [](auto r) { return &ktile<V, L, r>; });
}

}  // namespace
}  // namespace mopt::cpu
