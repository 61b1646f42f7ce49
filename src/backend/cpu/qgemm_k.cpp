// K-quant packing into the interleaved layout of qgemm_k.h, their activation side, and the portable kernels (the SIMD
// kernels' arithmetic lane by lane: the same exact integer sums, the same fp32 chain, so the same bits).
#include "backend/cpu/qgemm_k.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/qgemm.h"
#include "backend/cpu/quant.h"
#include "core/formats/formats.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

// One source super-block as codes, sub-block scales and mins, d and dmin.
struct SuperBlock {
  uint8_t q[kQKK];  // unsigned codes
  int8_t sc[16];    // [subs] scales
  uint8_t mn[8];    // Q4_K/Q5_K mins
  uint16_t d, dmin;
};

SuperBlock unpack(DType t, const uint8_t* blk) {
  SuperBlock s{};
  if (t == DType::Q6_K) {
    const auto& b = *reinterpret_cast<const BlockQ6_K*>(blk);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* ql = b.ql + 64 * h;
        const int qh = b.qh[32 * h + l];
        uint8_t* q = s.q + 128 * h;
        q[l] = static_cast<uint8_t>((ql[l] & 15) | ((qh >> 0) & 3) << 4);
        q[l + 32] = static_cast<uint8_t>((ql[l + 32] & 15) | ((qh >> 2) & 3) << 4);
        q[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | ((qh >> 4) & 3) << 4);
        q[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | ((qh >> 6) & 3) << 4);
      }
    std::memcpy(s.sc, b.scales, 16);
    s.d = b.d;
    return s;
  }
  const auto* b4 = reinterpret_cast<const BlockQ4_K*>(blk);
  const auto* b5 = t == DType::Q5_K ? reinterpret_cast<const BlockQ5_K*>(blk) : nullptr;
  const uint8_t* scales = b5 ? b5->scales : b4->scales;
  const uint8_t* qs = b5 ? b5->qs : b4->qs;
  const uint8_t* qh = b5 ? b5->qh : nullptr;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      s.q[64 * c + l] = static_cast<uint8_t>(lo);
      s.q[64 * c + 32 + l] = static_cast<uint8_t>(hi);
    }
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales, &sc, &m);
    s.sc[j] = static_cast<int8_t>(sc);  // < 64
    s.mn[j] = m;
  }
  std::memcpy(&s.d, blk, 2);
  std::memcpy(&s.dmin, blk + 2, 2);
  return s;
}

// ---- the packed layout read back element by element (the portable kernels) ----

inline int code(const QKLayout& L, const uint8_t* gb, int j, int e) {
  const int s = e / L.sub, W = L.width(), b = e & 3;
  if (!L.hbits) {  // Q4_K: nibble load n, low nibble for elements 8n..8n+3
    const int n = (e % L.sub) >> 3;
    const uint8_t nib = gb[L.load(s, n) + 4 * j + b];
    return (e & 4) ? nib >> 4 : nib & 15;
  }
  const int u = (e % L.sub) >> 2;  // wide: register u
  if (u < L.direct()) return gb[L.load(s, u) + 4 * j + b] & ((1 << W) - 1);
  uint32_t X = 0;  // the top bits of the loads, concatenated
  for (int t = 0; t < L.direct(); ++t) X |= static_cast<uint32_t>(gb[L.load(s, t) + 4 * j + b] >> W) << ((8 - W) * t);
  return static_cast<int>(X >> (W * (u - L.direct()))) & ((1 << W) - 1);
}
inline int pair_value(const uint8_t* plane, int j, int s) {
  return static_cast<int8_t>(plane[32 * (s >> 1) + 2 * j + (s & 1)]);
}

template <const QKLayout& L, int R>
void tile_scalar(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  for (int j = 0; j < valid; ++j)
    for (int r = 0; r < R; ++r) {
      const int8_t* x = a.qs + (m + r) * a.K;
      float acc = 0.0f;
      for (int64_t i = 0; i < a.nb; ++i) {
        const uint8_t* gb = g + i * L.bytes;
        const uint32_t* xs = a.sums + ((m + r) * a.nb + i) * 8;
        int32_t isum = 0, imin = 0;
        for (int s = 0; s < L.subs(); ++s) {
          int32_t dot = 0;
          for (int e = s * L.sub; e < (s + 1) * L.sub; ++e) dot += code(L, gb, j, e) * x[kQKK * i + e];
          isum += pair_value(gb + L.sc, j, s) * dot;
        }
        for (int s = 0; s < 2 * L.min_pairs(); ++s)
          imin += pair_value(gb + L.mn, j, s) * static_cast<int16_t>(xs[s >> 1] >> (16 * (s & 1)));
        const float dx = a.d[(m + r) * a.nb + i];
        uint16_t h;
        std::memcpy(&h, gb + L.d + 2 * j, 2);
        if constexpr (L.dmin) {
          uint16_t hm;
          std::memcpy(&hm, gb + L.dm + 2 * j, 2);
          const float t1 = dx * static_cast<float>(isum), t2 = -dx * static_cast<float>(imin);
          acc = std::fma(fp16_to_fp32(h), t1, acc);
          acc = std::fma(fp16_to_fp32(hm), t2, acc);
        } else {
          acc = std::fma(fp16_to_fp32(h), dx * static_cast<float>(isum - 32 * imin), acc);
        }
      }
      y[r * ldy + j] = acc;
    }
}


}  // namespace

namespace qgemm_scalar {
const QGemmSet q4_k = qgemm_set_of<4>(0, [](auto r) { return &tile_scalar<kLayoutQ4K, r>; });
const QGemmSet q5_k = qgemm_set_of<4>(0, [](auto r) { return &tile_scalar<kLayoutQ5K, r>; });
const QGemmSet q6_k = qgemm_set_of<4>(0, [](auto r) { return &tile_scalar<kLayoutQ6K, r>; });
}  // namespace qgemm_scalar

const QKLayout* qk_layout(DType t) {
  switch (t) {
    case DType::Q4_K: return &kLayoutQ4K;
    case DType::Q5_K: return &kLayoutQ5K;
    case DType::Q6_K: return &kLayoutQ6K;
    default: return nullptr;
  }
}

void qk_pack_row(DType t, const void* src, int64_t nsb, int j, uint8_t* group) {
  const QKLayout* Lp = qk_layout(t);
  MOPT_CHECK(Lp && j >= 0 && j < kQGroup, "qk_pack_row: %s row %d", dtype_name(t), j);
  const QKLayout& L = *Lp;
  const uint64_t src_block = dtype_traits(t).block_bytes;
  const int W = L.width();
  for (int64_t i = 0; i < nsb; ++i) {
    const SuperBlock s = unpack(t, static_cast<const uint8_t*>(src) + i * src_block);
    uint8_t* gb = group + i * L.bytes;
    for (int k = 0; k < L.subs(); ++k) {
      if (L.hbits) {  // wide loads
        for (int b = 0; b < 4; ++b) {
          uint32_t X = 0;
          for (int x = 0; L.direct() + x < L.sub / 4; ++x)
            X |= uint32_t{s.q[L.sub * k + 4 * (L.direct() + x) + b]} << (W * x);
          for (int t = 0; t < L.direct(); ++t)  // code | the next 8 - W bits of X above it
            gb[L.load(k, t) + 4 * j + b] =
                static_cast<uint8_t>(s.q[L.sub * k + 4 * t + b] | ((X >> ((8 - W) * t) << W) & 0xFF));
        }
      } else {
        for (int n = 0; n < L.sub / 8; ++n)
          for (int b = 0; b < 4; ++b) {
            const int e = L.sub * k + 8 * n + b;
            gb[L.load(k, n) + 4 * j + b] = static_cast<uint8_t>((s.q[e] & 15) | (s.q[e + 4] & 15) << 4);
          }
      }
      gb[L.sc + 32 * (k >> 1) + 2 * j + (k & 1)] = static_cast<uint8_t>(s.sc[k]);
      if (L.dmin) gb[L.mn + 32 * (k >> 1) + 2 * j + (k & 1)] = s.mn[k];
    }
    std::memcpy(gb + L.d + 2 * j, &s.d, 2);
    if (L.dmin) std::memcpy(gb + L.dm + 2 * j, &s.dmin, 2);
  }
}

void qk_quant_act(DType t, const float* x, int64_t K, int8_t* qs, float* d, uint32_t* sums) {
  const QKLayout* L = qk_layout(t);
  MOPT_CHECK(L && K % kQKK == 0, "qk_quant_act: %s, K=%lld", dtype_name(t), static_cast<long long>(K));
  for (int64_t i = 0; i < K / kQKK; ++i) {
    BlockQ8_K b;
    quantize_row(DType::Q8_K, x + i * kQKK, &b, kQKK);
    std::memcpy(qs + i * kQKK, b.qs, kQKK);
    d[i] = b.d;
    uint32_t* s = sums + 8 * i;
    for (int k = 0; k < 8; ++k) {
      int32_t lo = b.bsums[2 * k], hi = b.bsums[2 * k + 1];  // 16-element sums (Q6_K's sub-blocks)
      if (L->sub == 32)  // 32-element sums: pair k = sub-blocks 2k, 2k+1 (k < 4)
        lo = k < 4 ? b.bsums[4 * k] + b.bsums[4 * k + 1] : 0, hi = k < 4 ? b.bsums[4 * k + 2] + b.bsums[4 * k + 3] : 0;
      s[k] = static_cast<uint16_t>(lo) | static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16;
    }
  }
}

}  // namespace mopt::cpu
