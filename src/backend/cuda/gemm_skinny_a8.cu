// The skinny GEMM on the integer tensor cores for grouped int8 and 4-bit weights (gemm_skinny_a8.h says what and
// why).
//
// Layout. A warp owns MT tiles of 16 consecutive output features; KW warps of a CTA split k (warp kw takes steps
// kw, kw + KW, ...), reduced through shared memory in warp order (deterministic). A step is 64 inputs of a row =
// two groups of 32. One mma.m16n8k32 s8 takes one group of 16 rows: lane (g = lane / 4, t = lane % 4) holds A's
// rows g (a0, a2) and g + 8 (a1, a3) and B's column g (b0, b1) at logical k 4t .. 4t + 3 (a0, a1, b0) and
// 16 + 4t .. 16 + 4t + 3 (a2, a3, b1); which inputs of the group those are is free (a dot product does not depend on
// the order of k) as long as A and B agree:
//   int8 codes (NIB = false): inputs 8t .. 8t + 7 of the group, the lane's 8 bytes of each of its rows' groups as
//     loaded ([8t, 8t + 8) of each group's 32), the a of each group beside (float2 per row and step: [n, k / 32]);
//   4-bit codes (NIB): the group's 16 bytes hold input j in byte j's low nibble and input j + 16 in its high one
//     (weight_format.h), so the lane's 4 bytes [4t, 4t + 4) of a row's group, masked (w & 0x0f0f0f0f) and shifted
//     ((w >> 4) & 0x0f0f0f0f), are exactly inputs 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 as bytes 0 .. 15 (the
//     mma's natural order); (a, b) per row and step: a float4 of the step's two groups of 32, or the one (a, b) of a
//     larger group twice. The offset term b d_x sum(q_x) takes each activation group's code sum.
// Activations. One row (MX = 1) is quantized once per CTA into shared memory (k bytes of codes in input order,
// k / 32 scales d_x and, NIB, k / 32 products d_x sum(q_x)), after the PDL wait, from the prologue's fp32 values
// (load_x of gemm_skinny.cuh: RMSNorm's x * norm_w with 1 / rms applied to the result, SwiGLU's silu(g) * u), and
// every B column holds it, so D's column 0 (lanes t = 0: c0 row g, c2 row g + 8) is the product; with several rows
// (MX = 8) B's column g is token g, quantized at each step by the lanes (g, 0..3) that hold it, from the same
// values with the same codes and scales, and lane (g, t)'s D columns 2t, 2t + 1 are tokens 2t, 2t + 1. The exact
// int32 sum of a group (|d| <= 32 * 127 * 127) is added in fp32 times a d_x.
#include "backend/cuda/gemm_skinny_a8.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/func_attr.h"
#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
namespace {
using namespace skinny_detail;

constexpr int kMaxK = 16384;
constexpr int kThreads = kWarpsPerCta * 32;

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
__device__ __forceinline__ uint32_t load_stream4(const void* p) {
  uint32_t r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(r) : "l"(p));
  return r;
}

// d = a (16 x 32, s8) . b (32 x 8, s8) in s32, zero accumulator.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#else
  d[0] = d[1] = d[2] = d[3] = 0;
#endif
}

// Four fp32 values as int8 codes round(v * id) (to nearest even, within [-127, 127]) in one word, first value lowest.
__device__ __forceinline__ uint32_t pack_q8(const float* v, float id) {
  uint32_t w = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int q = max(-127, min(127, __float2int_rn(v[e] * id)));
    w |= (static_cast<uint32_t>(q) & 0xffu) << (8 * e);
  }
  return w;
}

// A group's quantization, from the 8 values each of its 4 lanes (lanes 4q .. 4q + 3) holds: the lane's codes as two
// words (xf[0..3], xf[4..7]), the group's d_x (as the CPU's Q8_0 activation blocks are made, cpu quant.cpp: codes
// from 1 / d, d kept in fp16) and, SUM, d_x times the sum of the group's 32 codes. Lanes with nothing to quantize
// take part with zeros.
template <bool SUM>
__device__ __forceinline__ uint2 quantize8(const float (&xf)[8], float& d_out, float& dsum_out) {
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(xf[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  d_out = __half2float(__float2half_rn(d));
  const uint2 q = make_uint2(pack_q8(xf, id), pack_q8(xf + 4, id));
  if constexpr (SUM) {
    int sum = __dp4a(static_cast<int>(q.x), 0x01010101, __dp4a(static_cast<int>(q.y), 0x01010101, 0));
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    dsum_out = d_out * static_cast<float>(sum);
  }
  return q;
}

// The group's 8 operand values of a lane (chunk ch, inputs [8 ch, 8 ch + 8), of row xr) after the prologue,
// quantized with the group's other 3 lanes (quantize8). ss: the RMSNorm sum of squares (kNorm).
template <int PRO, bool SUM>
__device__ __forceinline__ uint2 quantize_chunk(const SkinnyGemmParams& p, int xr, int ch, bool in, float& ss,
                                                float& d_out, float& dsum_out) {
  float xf[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (in) {
    float nw[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // kNorm only
    if constexpr (PRO == kNorm) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.norm_w) + ch), nw);
    load_x<PRO>(p, xr, ch, nw, xf, ss);
  }
  return quantize8<SUM>(xf, d_out, dsum_out);
}

// Four bf16 (a word pair) as fp32 (exact).
__device__ __forceinline__ void unpack4_bf16(uint2 w, float* f) {
  f[0] = __uint_as_float(w.x << 16), f[1] = __uint_as_float(w.x & 0xffff0000u);
  f[2] = __uint_as_float(w.y << 16), f[3] = __uint_as_float(w.y & 0xffff0000u);
}

// load_x for the 4 inputs [e, e + 4) of row `row` (the same values; no sum of squares: MX = 8 takes it from the
// CTA-wide pass).
template <int PRO>
__device__ __forceinline__ void load_x4(const SkinnyGemmParams& p, int row32, int e, float* xf) {
  const int64_t row = row32;
  if constexpr (PRO == kNorm) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p.x_f32 + row * p.k + e));
    float nw[4];
    unpack4_bf16(__ldg(reinterpret_cast<const uint2*>(p.norm_w + e)), nw);
    xf[0] = v.x * nw[0], xf[1] = v.y * nw[1], xf[2] = v.z * nw[2], xf[3] = v.w * nw[3];
  } else if constexpr (PRO == kSwiGlu) {
    const bf16* src = p.x + row * 2 * p.k + e;  // gate | up, each k wide
    float g[4], u[4];
    unpack4_bf16(__ldg(reinterpret_cast<const uint2*>(src)), g);
    unpack4_bf16(__ldg(reinterpret_cast<const uint2*>(src + p.k)), u);
#pragma unroll
    for (int j = 0; j < 4; ++j) xf[j] = silu_fast(g[j]) * u[j];
  } else {
    unpack4_bf16(__ldg(reinterpret_cast<const uint2*>(p.x + row * p.k + e)), xf);
  }
}

// NIB, MX = 8: lane t's B fragment of group `grp` of row xr, inputs 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 (the
// 4-bit codes' order), quantized with the group's other 3 lanes: the same codes, d_x and sum as the staged pass's.
template <int PRO>
__device__ __forceinline__ uint2 quantize_nib_b(const SkinnyGemmParams& p, int xr, int grp, int t, bool in,
                                                float& d_out, float& dsum_out) {
  float xf[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (in) {
    load_x4<PRO>(p, xr, 32 * grp + 4 * t, xf);
    load_x4<PRO>(p, xr, 32 * grp + 16 + 4 * t, xf + 4);
  }
  return quantize8<true>(xf, d_out, dsum_out);
}

// MX = 1: one row, staged: the CTA quantizes it once into shared memory. MX = kSkinnyMaxRows: up to 8 rows, each
// lane quantizing its own B fragment (token g) at every step; the codes, scales and group order are those of the
// staged pass, and the RMSNorm sums of squares come from a CTA-wide pass in the staged pass's order, so every row
// has the bits of a one-row call. NIB: 4-bit codes with (a, b) groups of 32 << gshift inputs.
template <int MT, int U, int KW, int NB, int MX, bool PERS, bool NIB, int PRO, int EPI>
__global__ void __launch_bounds__(kThreads) a8_kernel(const SkinnyGemmParams p) {
  // MX = 1: [k / 8] the row's codes, 8 a word pair; then [k / 32] fp32 scales d_x; NIB: then [k / 32] d_x sum(q_x)
  extern __shared__ uint2 s_x[];
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][MT][MX == 1 ? 2 : 4][32];
  __shared__ float s_ss[kWarpsPerCta][MX];
  constexpr int kAcc = MX == 1 ? 2 : 4;  // c0, c2 (token 0, rows g, g + 8); MX > 1: c0 .. c3 (tokens 2t, 2t + 1)
  constexpr int kStepBytes = NIB ? 32 : 64;  // a row's code bytes per step of 64 inputs
  // A row's codes of a step's group: int8, the lane's 8 bytes; NIB, its 4 bytes. Parameters of a row and step:
  // int8, a of its two groups; NIB, (a, b) of each.
  using Code = std::conditional_t<NIB, uint32_t, uint2>;
  using Par = std::conditional_t<NIB, float4, float2>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, kw = warp % KW;
  constexpr int kRowsPerCta = kWarpsPerCta / KW * 16 * MT;
  constexpr int kRing = NB * KW * U;  // steps between two loads into the same stage buffer
  const int tiles = (p.n + kRowsPerCta - 1) / kRowsPerCta;
  int tile = blockIdx.x;  // PERS: tiles blockIdx.x, + gridDim.x, ...
  int n0 = tile * kRowsPerCta + warp / KW * 16 * MT;
  const int steps = p.k / 64, groups = p.k / 32;
  const int gshift = NIB ? __ffs(p.qw.group_size >> 5) - 1 : 0;  // NIB: log2(group size / 32)
  const int64_t row_bytes = NIB ? p.k / 2 : p.k;
  const uint8_t* codes = static_cast<const uint8_t*>(p.qw.codes);

  Code wb[NB][U][MT][2][2];  // [stage][step][tile][row g, g + 8][group 2s, 2s + 1]
  Par ab[NB][U][MT][2];      // [stage][step][tile][row g, g + 8]
  auto load = [&](int b, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * KW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + 16 * mt + g + 8 * h;
          const bool in = s < steps && row < p.n;
          const uint8_t* at = codes + row * row_bytes + kStepBytes * s;
          if constexpr (NIB) {
            wb[b][u][mt][h][0] = in ? load_stream4(at + 4 * t) : 0u;
            wb[b][u][mt][h][1] = in ? load_stream4(at + 16 + 4 * t) : 0u;
            const float2* ga = reinterpret_cast<const float2*>(p.qw.group) + (static_cast<int64_t>(row) *
                                                                              (groups >> gshift));  // [n, k / G]
            if (!in) {
              ab[b][u][mt][h] = make_float4(0.f, 0.f, 0.f, 0.f);
            } else if (gshift == 0) {
              ab[b][u][mt][h] = __ldg(reinterpret_cast<const float4*>(ga) + s);  // groups 2s, 2s + 1
            } else {
              const float2 v = __ldg(ga + ((2 * s) >> gshift));  // one group holds the step
              ab[b][u][mt][h] = make_float4(v.x, v.y, v.x, v.y);
            }
          } else {
            wb[b][u][mt][h][0] = in ? load_stream8(at + 8 * t) : make_uint2(0, 0);
            wb[b][u][mt][h][1] = in ? load_stream8(at + 32 + 8 * t) : make_uint2(0, 0);
            const float* ga = p.qw.group + static_cast<int64_t>(row) * groups;  // [n, k / 32]
            ab[b][u][mt][h] = in ? __ldg(reinterpret_cast<const float2*>(ga) + s) : make_float2(0.f, 0.f);
          }
        }
    }
  };
  auto load_first = [&] {
#pragma unroll
    for (int b = 0; b < NB; ++b) load(b, kw + b * KW * U);
  };
  pdl_trigger();  // weights only before the wait, as in the other skinny kernels
  load_first();
  if (kw == 0 && n0 < p.n) {  // and the next part of each of the warp's rows (its share of l2_prefetch_bytes)
    const uint32_t rb = static_cast<uint32_t>(row_bytes);
    const uint32_t start = min(rb, static_cast<uint32_t>(kStepBytes * kRing));
    const uint32_t len = min(p.l2_prefetch_bytes / static_cast<uint32_t>(p.n), rb - start) & ~15u;
    for (int r = lane; r < 16 * MT && n0 + r < p.n && len > 0; r += 32)
      prefetch_l2(codes + static_cast<int64_t>(n0 + r) * row_bytes + start, len);
  }
  pdl_wait();

  int xrow[MX];  // input row of each activation row (rows past p.m: a copy of the last, never stored)
#pragma unroll
  for (int r = 0; r < MX; ++r) xrow[r] = p.x_rows ? p.x_rows[min(r, p.m - 1)] : min(r, p.m - 1);
  // The CTA-wide pass (thread i: chunks i, i + 256, ...): MX = 1 stages the quantized row; both sum the squares.
  float* s_d = reinterpret_cast<float*>(s_x + p.k / 8);
  float* s_dsum = s_d + groups;  // NIB only
  float ss[MX];
#pragma unroll
  for (int r = 0; r < MX; ++r) ss[r] = 0.f;
  if constexpr (MX == 1 || PRO == kNorm) {
#pragma unroll
    for (int r = 0; r < MX; ++r) {
      if (r >= p.m) break;
      for (int base = 0; base < p.k / 8; base += kThreads) {  // the same trip count in every lane (shuffles)
        const int ch = base + static_cast<int>(threadIdx.x);
        const bool in = ch < p.k / 8;  // p.k / 8 is a multiple of 8: a group's 4 lanes are all in or all out
        if constexpr (MX == 1) {
          float d, dsum;
          const uint2 q = quantize_chunk<PRO, NIB>(p, xrow[0], ch, in, ss[0], d, dsum);
          if (in) {
            s_x[ch] = q;
            if ((ch & 3) == 0) {
              s_d[ch >> 2] = d;
              if constexpr (NIB) s_dsum[ch >> 2] = dsum;
            }
          }
        } else if (in) {
          float xf[8], nw[8];
          unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.norm_w) + ch), nw);
          load_x<PRO>(p, xrow[r], ch, nw, xf, ss[r]);
        }
      }
    }
  }
  float out_scale[MX];
#pragma unroll
  for (int r = 0; r < MX; ++r) out_scale[r] = 1.f;
  if constexpr (PRO == kNorm) {
#pragma unroll
    for (int r = 0; r < MX; ++r) {
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], o);
      if (lane == 0) s_ss[warp][r] = ss[r];
    }
  }
  __syncthreads();
  if constexpr (PRO == kNorm) {
#pragma unroll
    for (int r = 0; r < MX; ++r) {
      float tot = 0.f;
      for (int w = 0; w < kWarpsPerCta; ++w) tot += s_ss[w][r];  // fixed order
      out_scale[r] = rsqrtf(tot / static_cast<float>(p.k) + p.norm_eps);
    }
  }

  const uint32_t* s_x32 = reinterpret_cast<const uint32_t*>(s_x);  // word j: inputs 4j .. 4j + 3
  float unused_ss = 0.f;
  const int my_row = p.x_rows ? p.x_rows[min(g, p.m - 1)] : min(g, p.m - 1);  // MX > 1: token g's input row
  for (;;) {  // the tiles of this CTA: one, or (PERS) several
    float acc[MT][kAcc];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int q = 0; q < kAcc; ++q) acc[mt][q] = 0.f;
    for (int s0 = kw; s0 < steps; s0 += kRing) {
#pragma unroll
      for (int hb = 0; hb < NB; ++hb) {
        const int sb = s0 + hb * KW * U;
        if (sb >= steps) break;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int s = sb + u * KW;
          if (s >= steps) break;
          // B (column g: token g; MX = 1: every column holds row 0) of groups 2s + j, and the d_x (NIB: and
          // d_x sum(q_x)) of the tokens of D's columns 2t, 2t + 1 (MX = 1: token 0's).
          uint2 xb[2];
          float dx[2][2], dsx[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int grp = 2 * s + j;
            if constexpr (MX == 1) {
              xb[j] = NIB ? make_uint2(s_x32[8 * grp + t], s_x32[8 * grp + 4 + t]) : s_x[4 * grp + t];
              dx[j][0] = dx[j][1] = s_d[grp];
              if constexpr (NIB) dsx[j][0] = dsx[j][1] = s_dsum[grp];
            } else {
              const bool in = g < p.m;
              float e, es = 0.f;
              if constexpr (NIB) xb[j] = quantize_nib_b<PRO>(p, my_row, grp, t, in, e, es);
              else xb[j] = quantize_chunk<PRO, false>(p, my_row, 4 * grp + t, in, unused_ss, e, es);
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                dx[j][c] = __shfl_sync(0xffffffffu, e, 4 * (2 * t + c));
                if constexpr (NIB) dsx[j][c] = __shfl_sync(0xffffffffu, es, 4 * (2 * t + c));
              }
            }
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const Code(&w)[2][2] = wb[hb][u][mt];
            int r[2][4];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              if constexpr (NIB) {
                constexpr uint32_t kLo = 0x0f0f0f0fu;
                mma_s8(r[j], w[0][j] & kLo, w[1][j] & kLo, (w[0][j] >> 4) & kLo, (w[1][j] >> 4) & kLo, xb[j].x,
                       xb[j].y);
              } else {
                mma_s8(r[j], w[0][j].x, w[1][j].x, w[0][j].y, w[1][j].y, xb[j].x, xb[j].y);
              }
            }
            const Par a[2] = {ab[hb][u][mt][0], ab[hb][u][mt][1]};
#pragma unroll
            for (int q = 0; q < kAcc; ++q) {  // q: MX = 1 c0, c2; else c0 .. c3 (row g + 8 (q / 2), token 2t + q % 2)
              const int cq = MX == 1 ? 2 * q : q, h = cq / 2, c = cq % 2;
              if constexpr (NIB) {  // a q_w + b: a d_x sum(q_w q_x) + b d_x sum(q_x), group by group
                acc[mt][q] = fmaf(static_cast<float>(r[0][cq]), a[h].x * dx[0][c], acc[mt][q]);
                acc[mt][q] = fmaf(a[h].y, dsx[0][c], acc[mt][q]);
                acc[mt][q] = fmaf(static_cast<float>(r[1][cq]), a[h].z * dx[1][c], acc[mt][q]);
                acc[mt][q] = fmaf(a[h].w, dsx[1][c], acc[mt][q]);
              } else {
                acc[mt][q] = fmaf(static_cast<float>(r[0][cq]), a[h].x * dx[0][c], acc[mt][q]);
                acc[mt][q] = fmaf(static_cast<float>(r[1][cq]), a[h].y * dx[1][c], acc[mt][q]);
              }
            }
          }
        }
        if (sb + kRing < steps) load(hb, sb + kRing);
      }
    }

    // PERS: the next tile's first stages in flight during this tile's reduction and stores.
    const int tile_n0 = n0;
    int next = tiles;
    if constexpr (PERS) {
      next = tile + static_cast<int>(gridDim.x);
      if (next < tiles) {
        n0 = next * kRowsPerCta + warp / KW * 16 * MT;
        load_first();
      }
    }
    if constexpr (KW > 1) {  // fixed-order sum over the KW warps of a row group
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < kAcc; ++q) s_red[warp][mt][q][lane] = acc[mt][q];
      __syncthreads();
      if (kw == 0)
        for (int w = 1; w < KW; ++w)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int q = 0; q < kAcc; ++q) acc[mt][q] += s_red[warp + w][mt][q][lane];
    }
    if (kw == 0 && (MX > 1 || t == 0))
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < kAcc; ++q) {
          const int cq = MX == 1 ? 2 * q : q, i = MX == 1 ? 0 : 2 * t + cq % 2;
          const int n = tile_n0 + 16 * mt + g + 8 * (cq / 2);
          float os = out_scale[0];  // token i's (a select, not a run-time index into registers)
#pragma unroll
          for (int r = 1; r < MX; ++r) os = r == i ? out_scale[r] : os;
          if (n < p.n && i < p.m) store_out<EPI>(p, i, n, acc[mt][q] * os);
        }
    if (!PERS || next >= tiles) break;
    tile = next;
    if constexpr (KW > 1) __syncthreads();  // kw 0's reads of s_red are done before the next tile's writes
  }
}

// One row staged in shared memory where it fits (k <= kMaxK), else (and for several rows) quantized per step.
// PERS: a grid of at most the CTAs resident at once, each taking tiles blockIdx.x, + gridDim.x, ... (the activation
// pass once per CTA; every tile's bits are the plain grid's).
template <int MT, int U, int KW, int NB, bool PERS, bool NIB, int PRO, int EPI>
cudaError_t launch_tiling(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int kRows = kWarpsPerCta / KW * 16 * MT;
  const bool staged = p.m == 1 && p.k <= kMaxK;
  // codes + scales (+ NIB: the scaled code sums)
  const size_t smem = staged ? static_cast<size_t>(p.k) + static_cast<size_t>(p.k) / 8 * (NIB ? 2 : 1) : 0;
  const auto kernel = staged ? a8_kernel<MT, U, KW, NB, 1, PERS, NIB, PRO, EPI>
                             : a8_kernel<MT, U, KW, NB, kSkinnyMaxRows, PERS, NIB, PRO, EPI>;
  int ctas = (p.n + kRows - 1) / kRows;
  if constexpr (PERS) {
    if (const cudaError_t e = use_decode_carveout(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
    int resident = 0;
    if (const cudaError_t e = resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem,
                                            kDecodeCarveoutPercent, &resident);
        e != cudaSuccess)
      return e;
    ctas = std::min(ctas, resident);
  }
  return launch_pdl_decode(kernel, dim3(ctas), dim3(kThreads), smem, stream, p);
}

template <int I, bool NIB, int PRO, int EPI>
cudaError_t launch_index(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr A8Tiling t = kA8TilingTable[I];
  return launch_tiling<t.mt, t.u, t.kw, t.nb, t.persistent, NIB, PRO, EPI>(p, stream);
}

template <bool NIB, int PRO, int EPI>
cudaError_t launch_pe(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (tiling) {
    case 0: return launch_index<0, NIB, PRO, EPI>(p, stream);
    case 1: return launch_index<1, NIB, PRO, EPI>(p, stream);
    case 2: return launch_index<2, NIB, PRO, EPI>(p, stream);
    case 3: return launch_index<3, NIB, PRO, EPI>(p, stream);
    case 4: return launch_index<4, NIB, PRO, EPI>(p, stream);
    case 5: return launch_index<5, NIB, PRO, EPI>(p, stream);
    case 6: return launch_index<6, NIB, PRO, EPI>(p, stream);
    case 7: return launch_index<7, NIB, PRO, EPI>(p, stream);
    default: return cudaErrorNotSupported;
  }
}
static_assert(kA8Tilings == 8, "launch_pe's cases");

template <bool NIB, int PRO>
cudaError_t launch_p(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  return p.epilogue == SkinnyEpilogue::kAddResidual ? launch_pe<NIB, PRO, kAddRes>(p, tiling, stream)
                                                    : launch_pe<NIB, PRO, kStore>(p, tiling, stream);
}

template <bool NIB>
cudaError_t launch_fmt(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (p.prologue) {
    case SkinnyPrologue::kNone: return launch_p<NIB, kPlain>(p, tiling, stream);
    case SkinnyPrologue::kRmsNorm: return launch_p<NIB, kNorm>(p, tiling, stream);
    case SkinnyPrologue::kSwiGlu: return launch_p<NIB, kSwiGlu>(p, tiling, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace

cudaError_t launch_skinny_a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  if (p.m < 1 || p.m > kSkinnyMaxRows || !a8_supports(p.qw) || !p.qw.codes || p.k <= 0 || p.k % 64 != 0 ||
      p.k % p.qw.group_size != 0 || p.n <= 0 || tiling < 0 || tiling >= kA8Tilings || p.row_slice != 0)
    return cudaErrorNotSupported;
  const bool nib = p.qw.fmt == WeightFormat::kNib4;
  // The operands (as launch_skinny_gemm checks them): 16-byte activation rows; codes of 8 bytes (int8) or 4
  // (4-bit), 16 for the L2 prefetch's bulk reads; groups of 8 (a float2), 16 where a float4 holds a step's two
  // (a, b) of 4-bit groups of 32.
  const auto misaligned = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a != 0; };
  const uintptr_t codes_align = p.l2_prefetch_bytes ? 16 : nib ? 4 : 8;
  const uintptr_t group_align = nib && p.qw.group_size == 32 ? 16 : 8;
  if (!p.y || misaligned(p.qw.codes, codes_align) || misaligned(p.qw.group, group_align) ||
      (p.epilogue == SkinnyEpilogue::kAddResidual && p.bias))
    return cudaErrorInvalidValue;
  if (p.prologue == SkinnyPrologue::kRmsNorm ? !p.x_f32 || !p.norm_w || misaligned(p.x_f32, 16) ||
                                                   misaligned(p.norm_w, 16) || !(p.norm_eps >= 0.f)
                                             : !p.x || misaligned(p.x, 16))
    return cudaErrorInvalidValue;
  return nib ? launch_fmt<true>(p, tiling, stream) : launch_fmt<false>(p, tiling, stream);
}

}  // namespace mopt::cuda
