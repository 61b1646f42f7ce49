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

// Sub-block pair k (sub-blocks 2k, 2k + 1) of the group-block g, rows V::L * h.. (this half's bytes at hoff = 4 *
// V::L * h in each 64-byte load), against the R tokens' codes x[r] of super-block i: isum[r] += each sub-block's
// integer dot times its scale.
template <class V, const QKLayout& L, int R>
[[gnu::always_inline]] inline void ksub_pair(const uint8_t* g, int64_t i, int h, int k, const int8_t* const* x,
                                             typename V::I* isum) {
  using I = typename V::I;
  constexpr int CR = kCodeRegs<L>, NG = L.sub / 4 / CR;    // a sub-block's code registers: NG groups of CR
  constexpr int kFold = V::kS16 ? L.s16_regs : L.sub / 4;  // code registers per fold
  const int64_t hoff = 4 * V::L * h;
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
        for (int r = 0; r < R; ++r) sub[r] = V::dot4(sub[r], c[q], V::bcast(x[r] + kQKK * i + L.sub * s + 4 * u));
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

// The end of super-block i for half h of the group-block g: the min term from the tokens' sums xs[r], then the fp32
// epilogue of qgemm_k.h into acc[r] with the tokens' scales xd[r][i].
template <class V, const QKLayout& L, int R>
[[gnu::always_inline]] inline void ksuper_end(const uint8_t* g, int64_t i, int h, const float* const* xd,
                                              const uint32_t* const* xs, const typename V::I* isum,
                                              typename V::F* acc) {
  using I = typename V::I;
  using F = typename V::F;
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
      acc[r] = V::fmadd(dm, t2, V::fmadd(dw, t1, acc[r]));
    }
  } else {
    for (int r = 0; r < R; ++r) {
      const I t = V::sub32(isum[r], V::template shl32<5>(imin[r]));
      acc[r] = V::fmadd(dw, V::mul(V::set1(xd[r][i]), V::cvt(t)), acc[r]);
    }
  }
}

// Sub-block pair k's share of the lines kQPrefetch bytes ahead of the group-block g (its lines spread over the
// pairs).
template <const QKLayout& L>
inline void kprefetch(const uint8_t* g, int k) {
  constexpr int64_t lines = L.bytes / 64, n = L.subs() / 2;
  for (int64_t o = 64 * (k * lines / n); o < 64 * ((k + 1) * lines / n); o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(g + kQPrefetch + o), _MM_HINT_T0);
}

// R tokens x one group (16 rows), the whole row; per super-block and half of V::L rows: the sub-blocks' integer dots
// scaled into isum, the min term, then the fp32 epilogue of qgemm_k.h.
template <class V, const QKLayout& L, int R>
void ktile(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int H = kQGroup / V::L;
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
    for (int h = 0; h < H; ++h) {
      I isum[R];
      for (int r = 0; r < R; ++r) isum[r] = V::zero();
      for (int k = 0; k < L.subs() / 2; ++k) {
        // One token (decode) streams the weights; a prompt's calls after its tile's first find them in cache,
        // and prefetching in every call was slower (docs/cpu_measured.md, thirty-seventh session).
        if (R == 1 && h == 0) kprefetch<L>(g, k);
        ksub_pair<V, L, R>(g, i, h, k, x, isum);
      }
      ksuper_end<V, L, R>(g, i, h, xd, xs, isum, acc[h]);
    }
  }
  store_group<V, R>(acc, y, ldy, valid);
}

// One token x two groups (QPairFn), taking turns a sub-block pair at a time (512 bytes of Q4_K codes of one group, then
// of the other; every half of the group's rows in its turn): two memory streams per core, as the Q4_0 / Q8_0 pair
// kernel reads them (qgemm.cpp, stream_items; whole super-blocks or two sub-block pairs a turn were slower,
// docs/cpu_measured.md). Each group's integer sums are exact and its fp32 chain is ktile<V, L, 1>'s: the same bits.
template <class V, const QKLayout& L>
void ktile_pair(const uint8_t* const* gp, const QAct& a, float* const* y, const int* valid) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int H = kQGroup / V::L;
  F acc[2][H][1];
  for (auto& grp : acc)
    for (auto& half : grp) half[0] = V::fzero();
  const int8_t* const x[1] = {a.qs};
  const float* const xd[1] = {a.d};
  const uint32_t* const xs[1] = {a.sums};
  for (int64_t i = 0; i < a.nb; ++i) {
    const uint8_t* g[2] = {gp[0] + i * L.bytes, gp[1] + i * L.bytes};
    I isum[2][H];
    for (auto& grp : isum)
      for (auto& v : grp) v = V::zero();
    for (int k = 0; k < L.subs() / 2; ++k)
      for (int s = 0; s < 2; ++s) {
        kprefetch<L>(g[s], k);
        for (int h = 0; h < H; ++h) ksub_pair<V, L, 1>(g[s], i, h, k, x, &isum[s][h]);
      }
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < H; ++h) ksuper_end<V, L, 1>(g[s], i, h, xd, xs, &isum[s][h], acc[s][h]);
  }
  store_group<V, 1>(acc[0], y[0], 0, valid[0]);
  store_group<V, 1>(acc[1], y[1], 0, valid[1]);
}

template <class V, const QKLayout& L, int N>
constexpr QGemmSet make_kset() {
  QGemmSet s = qgemm_set_of<N>(0, [](auto r) { return &ktile<V, L, r>; });
  s.pair = &ktile_pair<V, L>;
  return s;
}

}  // namespace
}  // namespace mopt::cpu
