// The interleaved K-quant tile kernels (layout: qgemm_k.h), written once over the vector policy V of qgemm_impl.h and
// instantiated per instruction set next to the Q4_0 / Q8_0 ones. Internal linkage only (see qgemm_impl.h).
//
// V additions: kS16 (sub-block dots summed in s16: maddubs, folded every L.s16_regs code registers), and_ / orand
// (a | b & m) / set8 / shr16<S>, pairs (an int8 pair plane -> s16 pairs per lane), scale<E> (sub-block
// 2k + E's scale per lane, in the form fold takes), fold (isum += sub-block sum * scale), pdot (acc += pairs . pairs),
// sub32, shl32<S>, mul.
#pragma once

#include <algorithm>
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

// Code registers c[0..kCodeRegs) of sub-block s, group n of them (layout: qgemm_k.h), from the group-block g and
// this half's byte offset hoff within a 64-byte load: register u = n * kCodeRegs + q holds elements 4u..4u+3.
// Q4_K: a group is one nibble load, its low then its high nibbles. Q5_K / Q6_K: one group, the T wide loads masked
// to W bits, then the remaining codes: code x takes from each load t whose top bits hold part of it the field
// (L_t >> d) & mask, d = W (x + 1) - (8 - W) t (the 16-bit shift's bits from the lane's other byte land above it).
// Each load is pinned to a register: otherwise GCC folded it into the mask's `vpand` as a memory operand and loaded
// the same bytes again for the shift, and the loop ran out of load slots (docs/cpu_measured.md).
template <const QKLayout& L>
inline constexpr int kCodeRegs = L.hbits ? L.sub / 4 : 2;
template <class V, const QKLayout& L, int n>
inline void sub_codes(const uint8_t* g, int s, int64_t hoff, typename V::I* c) {
  using I = typename V::I;
  if constexpr (L.hbits == 0) {
    I v = V::load(g + L.load(s, n) + hoff);
    V::pin(v);
    c[0] = V::lo(v);
    c[1] = V::hi(v);
  } else {
    constexpr int W = L.width(), T = L.direct(), S = 8 - W;  // S spare bits a byte
    I l[T];
    for (int t = 0; t < T; ++t) {
      l[t] = V::load(g + L.load(s, t) + hoff);
      V::pin(l[t]);
      c[t] = V::and_(l[t], V::set8(static_cast<char>((1 << W) - 1)));
    }
    static_for<L.sub / 4 - T>([&](auto x) {
      static_for<T>([&](auto t) {
        constexpr int lo = S * t - W * x, hi = lo + S;  // load t's spare bits as bits [lo, hi) of code x
        if constexpr (hi > 0 && lo < W) {               // the first such load has lo <= 0
          constexpr int mask = ((1 << std::min(hi, W)) - 1) & ~((1 << std::max(lo, 0)) - 1);
          const I f = V::template shr16<W * (x + 1) - S * t>(l[t]);
          const I m = V::set8(static_cast<char>(mask));
          if constexpr (lo <= 0) {
            c[T + x] = V::and_(f, m);
          } else {
            c[T + x] = V::orand(c[T + x], f, m);
          }
        }
      });
    });
  }
}

// R tokens x one group (16 rows), the whole row; per super-block and half of V::L rows: the sub-blocks' integer dots
// scaled into isum, the min term into imin, then the fp32 epilogue of qgemm_k.h.
template <class V, const QKLayout& L, int R>
void ktile(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int H = kQGroup / V::L;
  constexpr int CR = kCodeRegs<L>, NG = L.sub / 4 / CR;    // a sub-block's code registers: NG groups of CR
  constexpr int kFold = V::kS16 ? L.s16_regs : L.sub / 4;  // code registers per fold
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
      _mm_prefetch(reinterpret_cast<const char*>(g + kQPrefetch + o), _MM_HINT_T0);
    for (int h = 0; h < H; ++h) {
      const int64_t hoff = 4 * V::L * h;  // this half's bytes in a 64-byte load
      I isum[R];
      for (int r = 0; r < R; ++r) isum[r] = V::zero();
      for (int k = 0; k < L.subs() / 2; ++k) {
        const I P = V::pairs(g + L.sc + 32 * k + 2 * V::L * h);
        static_for<2>([&](auto E) {
          const int s = 2 * k + E;
          const I sc = V::template scale<E>(P);
          I sub[R];
          for (int r = 0; r < R; ++r) sub[r] = V::zero();
          static_for<NG>([&](auto n) {
            I c[CR];
            sub_codes<V, L, n>(g, s, hoff, c);
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
