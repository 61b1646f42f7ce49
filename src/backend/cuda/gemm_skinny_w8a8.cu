// The skinny GEMM on the integer tensor cores for grouped int8 weights (gemm_skinny_w8a8.h says what and why).
//
// Layout. A warp owns MT tiles of 16 consecutive output features; KW warps of a CTA split k (warp kw takes steps
// kw, kw + KW, ...), reduced through shared memory in warp order (deterministic). A step is 64 bytes of a row = two
// groups of 32 inputs. Lane (g = lane / 4, t = lane % 4) loads, per tile and step, 8 bytes of each of the two
// groups of rows g and g + 8: bytes [8t, 8t + 8) of each group, with the group's scales (a float2 per row: the
// two groups are adjacent in [n, k / 32]). One mma.m16n8k32 s8 takes one group of 16 rows: the fragments hold
// logical k 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 (A: a0 / a2 row g, a1 / a3 row g + 8; B: b0 / b1 column
// g), here inputs 8t .. 8t + 3 and 8t + 4 .. 8t + 7 of the group for A and B alike (a dot product does not depend
// on the order of k), so every lane's two 4-byte registers of a row are its 8 loaded bytes as they are, and the
// activations' the 8 codes at the same inputs. One row (MX = 1) is quantized once per CTA into shared memory (k
// bytes of codes, k / 32 scales), after the PDL wait, from the prologue's fp32 values (load_x of
// gemm_skinny.cuh: RMSNorm's x * norm_w with 1 / rms applied to the result, SwiGLU's silu(g) * u), and every B
// column holds it, so D's column 0 (lanes t = 0: c0 row g, c2 row g + 8) is the product; with several rows
// (MX = 8) B's column g is token g, quantized at each step by the lanes (g, 0..3) that hold it, and lane (g, t)'s
// D columns 2t, 2t + 1 are tokens 2t, 2t + 1. The exact int32 sum of a group (|d| <= 32 * 127 * 127) is added in
// fp32 times a_w d_x.
#include "backend/cuda/gemm_skinny_w8a8.h"

#include <cuda_fp16.h>

#include <algorithm>

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

// The group's 8 operand values of a lane (chunk ch of row xr) after the prologue, quantized with their group's
// 3 neighbouring lanes (lanes 4q .. 4q + 3 hold the group's 4 chunks): the codes as two words and the group's
// d_x, as the CPU's Q8_0 activation blocks are made (cpu quant.cpp: codes from 1 / d, d kept in fp16). Lanes
// with in = false take part in the shuffles with zeros. ss: the RMSNorm sum of squares (kNorm).
template <int PRO>
__device__ __forceinline__ uint2 quantize_chunk(const SkinnyGemmParams& p, int xr, int ch, bool in, float& ss,
                                                float& d_out) {
  float xf[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (in) {
    float nw[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // kNorm only
    if constexpr (PRO == kNorm) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.norm_w) + ch), nw);
    load_x<PRO>(p, xr, ch, nw, xf, ss);
  }
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(xf[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  d_out = __half2float(__float2half_rn(d));
  return make_uint2(pack_q8(xf, id), pack_q8(xf + 4, id));
}

// MX = 1: one row, staged: the CTA quantizes it once into shared memory. MX = kSkinnyMaxRows: up to 8 rows, each
// lane quantizing its own B fragment (token g, inputs 8t .. 8t + 7 of each group) at every step; the codes, scales
// and group order are those of the staged pass, and the RMSNorm sums of squares come from a CTA-wide pass in the
// staged pass's order, so every row has the bits of a one-row call.
template <int MT, int U, int KW, int NB, int MX, bool PERS, int PRO, int EPI>
__global__ void __launch_bounds__(kThreads) w8a8_kernel(const SkinnyGemmParams p) {
  extern __shared__ uint2 s_x[];  // MX = 1: [k / 8] the row's codes, 8 a word pair; then [k / 32] fp32 scales d_x
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][MT][MX == 1 ? 2 : 4][32];
  __shared__ float s_ss[kWarpsPerCta][MX];
  constexpr int kAcc = MX == 1 ? 2 : 4;  // c0, c2 (token 0, rows g, g + 8); MX > 1: c0 .. c3 (tokens 2t, 2t + 1)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, kw = warp % KW;
  constexpr int kRowsPerCta = kWarpsPerCta / KW * 16 * MT;
  constexpr int kRing = NB * KW * U;  // steps between two loads into the same stage buffer
  const int tiles = (p.n + kRowsPerCta - 1) / kRowsPerCta;
  int tile = blockIdx.x;  // PERS: tiles blockIdx.x, + gridDim.x, ...
  int n0 = tile * kRowsPerCta + warp / KW * 16 * MT;
  const int steps = p.k / 64, groups = p.k / 32;
  const int8_t* codes = static_cast<const int8_t*>(p.qw.codes);

  uint2 wb[NB][U][MT][2][2];  // [stage][step][tile][row g, g + 8][group 2s, 2s + 1]
  float2 ab[NB][U][MT][2];    // a_w of the two groups, rows g and g + 8
  auto load = [&](int b, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * KW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + 16 * mt + g + 8 * h;
          if (s < steps && row < p.n) {
            const int8_t* at = codes + static_cast<int64_t>(row) * p.k + 64 * s + 8 * t;
            wb[b][u][mt][h][0] = load_stream8(at);
            wb[b][u][mt][h][1] = load_stream8(at + 32);
            const float* ga = p.qw.group + static_cast<int64_t>(row) * groups;  // [n, k / 32]
            ab[b][u][mt][h] = __ldg(reinterpret_cast<const float2*>(ga) + s);
          } else {
            wb[b][u][mt][h][0] = wb[b][u][mt][h][1] = make_uint2(0, 0);
            ab[b][u][mt][h] = make_float2(0.f, 0.f);
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
  pdl_wait();

  int xrow[MX];  // input row of each activation row (rows past p.m: a copy of the last, never stored)
#pragma unroll
  for (int r = 0; r < MX; ++r) xrow[r] = p.x_rows ? p.x_rows[min(r, p.m - 1)] : min(r, p.m - 1);
  // The CTA-wide pass (thread i: chunks i, i + 256, ...): MX = 1 stages the quantized row; both sum the squares.
  float* s_d = reinterpret_cast<float*>(s_x + p.k / 8);
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
          float d;
          const uint2 q = quantize_chunk<PRO>(p, xrow[0], ch, in, ss[0], d);
          if (in) {
            s_x[ch] = q;
            if ((ch & 3) == 0) s_d[ch >> 2] = d;
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
          // B (column g: token g; MX = 1: every column holds row 0) at inputs 8t .. 8t + 7 of groups 2s, 2s + 1,
          // and the d_x of the tokens of D's columns 2t, 2t + 1 (MX = 1: token 0's).
          uint2 x0, x1;
          float d0[2], d1[2];
          if constexpr (MX == 1) {
            x0 = s_x[8 * s + t], x1 = s_x[8 * s + 4 + t];
            d0[0] = d0[1] = s_d[2 * s];
            d1[0] = d1[1] = s_d[2 * s + 1];
          } else {
            const bool in = g < p.m;
            float e0, e1;
            x0 = quantize_chunk<PRO>(p, my_row, 8 * s + t, in, unused_ss, e0);
            x1 = quantize_chunk<PRO>(p, my_row, 8 * s + 4 + t, in, unused_ss, e1);
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              d0[c] = __shfl_sync(0xffffffffu, e0, 4 * (2 * t + c));
              d1[c] = __shfl_sync(0xffffffffu, e1, 4 * (2 * t + c));
            }
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint2(&w)[2][2] = wb[hb][u][mt];
            int r0[4], r1[4];
            mma_s8(r0, w[0][0].x, w[1][0].x, w[0][0].y, w[1][0].y, x0.x, x0.y);
            mma_s8(r1, w[0][1].x, w[1][1].x, w[0][1].y, w[1][1].y, x1.x, x1.y);
            const float2 a[2] = {ab[hb][u][mt][0], ab[hb][u][mt][1]};
#pragma unroll
            for (int q = 0; q < kAcc; ++q) {  // q: MX = 1 c0, c2; else c0 .. c3 (row g + 8 (q / 2), token 2t + q % 2)
              const int cq = MX == 1 ? 2 * q : q, h = cq / 2, c = cq % 2;
              acc[mt][q] = fmaf(static_cast<float>(r0[cq]), a[h].x * d0[c], acc[mt][q]);
              acc[mt][q] = fmaf(static_cast<float>(r1[cq]), a[h].y * d1[c], acc[mt][q]);
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
template <int MT, int U, int KW, int NB, bool PERS, int PRO, int EPI>
cudaError_t launch_tiling(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int kRows = kWarpsPerCta / KW * 16 * MT;
  const bool staged = p.m == 1 && p.k <= kMaxK;
  const size_t smem = staged ? static_cast<size_t>(p.k) + static_cast<size_t>(p.k) / 8 : 0;  // codes + scales
  const auto kernel = staged ? w8a8_kernel<MT, U, KW, NB, 1, PERS, PRO, EPI>
                             : w8a8_kernel<MT, U, KW, NB, kSkinnyMaxRows, PERS, PRO, EPI>;
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

template <int PRO, int EPI>
cudaError_t launch_pe(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (tiling) {  // (MT, U, KW, NB)
    case 0: return launch_tiling<1, 2, 8, 2, false, PRO, EPI>(p, stream);
    case 1: return launch_tiling<1, 4, 8, 2, false, PRO, EPI>(p, stream);
    case 2: return launch_tiling<2, 2, 8, 2, false, PRO, EPI>(p, stream);
    case 3: return launch_tiling<1, 2, 4, 2, false, PRO, EPI>(p, stream);
    case 4: return launch_tiling<1, 1, 8, 4, false, PRO, EPI>(p, stream);
    case 5: return launch_tiling<2, 2, 4, 2, false, PRO, EPI>(p, stream);
    case 6: return launch_tiling<1, 2, 8, 2, true, PRO, EPI>(p, stream);  // persistent 0
    case 7: return launch_tiling<1, 1, 8, 4, true, PRO, EPI>(p, stream);  // persistent 4
    default: return cudaErrorNotSupported;
  }
}
static_assert(kW8a8Tilings == 8, "launch_pe's cases");

template <int PRO>
cudaError_t launch_p(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  return p.epilogue == SkinnyEpilogue::kAddResidual ? launch_pe<PRO, kAddRes>(p, tiling, stream)
                                                    : launch_pe<PRO, kStore>(p, tiling, stream);
}

}  // namespace

cudaError_t launch_skinny_w8a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  if (p.m < 1 || p.m > kSkinnyMaxRows || p.qw.fmt != WeightFormat::kInt8 || p.qw.group_size != 32 || p.qw.affine ||
      p.qw.row_scale || !p.qw.group || !p.qw.codes || p.k <= 0 || p.k % 64 != 0 || p.n <= 0 || tiling < 0 ||
      tiling >= kW8a8Tilings || p.row_slice != 0)
    return cudaErrorNotSupported;
  // The operands (as launch_skinny_gemm checks them): 16-byte activation rows, 8-byte codes and group pairs.
  const auto misaligned = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a != 0; };
  if (!p.y || misaligned(p.qw.codes, 8) || misaligned(p.qw.group, 8) ||
      (p.epilogue == SkinnyEpilogue::kAddResidual && p.bias))
    return cudaErrorInvalidValue;
  if (p.prologue == SkinnyPrologue::kRmsNorm ? !p.x_f32 || !p.norm_w || misaligned(p.x_f32, 16) ||
                                                   misaligned(p.norm_w, 16) || !(p.norm_eps >= 0.f)
                                             : !p.x || misaligned(p.x, 16))
    return cudaErrorInvalidValue;
  switch (p.prologue) {
    case SkinnyPrologue::kNone: return launch_p<kPlain>(p, tiling, stream);
    case SkinnyPrologue::kRmsNorm: return launch_p<kNorm>(p, tiling, stream);
    case SkinnyPrologue::kSwiGlu: return launch_p<kSwiGlu>(p, tiling, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace mopt::cuda
