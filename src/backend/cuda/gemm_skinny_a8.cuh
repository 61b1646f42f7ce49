// Device helpers of the a8 skinny kernels (gemm_skinny_a8.h): the kernel of 1 .. 8 rows (gemm_skinny_a8.cu) and
// the wide one-row 4-bit tilings (gemm_skinny_a8_wide.cu) share the activations' quantization (the same codes,
// scales and RMSNorm sums in both, so their outputs have the same bits), the integer mma, the reduction over the
// warps splitting k, the persistent grids' step to the next tile and the launch.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/func_attr.h"
#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
namespace a8_detail {
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

// d += a (16 x 32, s8) . b (32 x 8, s8) in s32 (exact: the chained mmas of one group sum its products).
__device__ __forceinline__ void mma_s8_acc(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Bytes of shared memory the staged row of activation_pass takes (MX = 1): k codes, k / 32 d_x and, NIB, k / 32
// d_x sum(q_x).
constexpr size_t staged_row_bytes(int k, bool nib) {
  return static_cast<size_t>(k) + static_cast<size_t>(k) / 8 * (nib ? 2 : 1);
}

// A step's two groups of 4-bit codes added to acc, in the order every a8 tiling of 4-bit codes uses (so that tilings
// of equal KW give equal bits): a d_x sum(q_w q_x) + b d_x sum(q_x), group 2s, then 2s + 1. r0, r1: the groups'
// integer dots; ab: (a, b) of group 2s, then of 2s + 1; dx, dsum: d_x and d_x sum(q_x) of each.
__device__ __forceinline__ void add_nib_step(float& acc, int r0, int r1, float4 ab, float dx0, float dx1,
                                             float dsum0, float dsum1) {
  acc = fmaf(static_cast<float>(r0), ab.x * dx0, acc);
  acc = fmaf(ab.y, dsum0, acc);
  acc = fmaf(static_cast<float>(r1), ab.z * dx1, acc);
  acc = fmaf(ab.w, dsum1, acc);
}

// The CTA-wide pass over the activation rows, after the PDL wait (thread i: chunks i, i + 256, ... of 8 inputs).
// MX = 1 stages row xrow[0] quantized into shared memory s_x: [k / 8] its codes, 8 a word pair (word j: inputs
// 4j .. 4j + 3); then [k / 32] fp32 scales d_x; NIB: then [k / 32] d_x sum(q_x). With RMSNorm, every row's sum of
// squares is summed in this fixed order (lanes, then warps through s_ss) and out_scale[r] = 1 / rms; else 1.
// Ends with __syncthreads.
template <int MX, bool NIB, int PRO>
__device__ __forceinline__ void activation_pass(const SkinnyGemmParams& p, const int (&xrow)[MX], uint2* s_x,
                                                float (&s_ss)[kWarpsPerCta][MX], float (&out_scale)[MX]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* s_d = reinterpret_cast<float*>(s_x + p.k / 8);
  float* s_dsum = s_d + p.k / 32;  // NIB only
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
}

// The fixed-order sum over the KW warps that split k for one group of rows (warps kw = 0 .. KW - 1 of it are
// consecutive): warp kw = 0's acc += those of kw = 1, 2, ... in turn, lane by lane. s_red [kWarpsPerCta][MT][NA][32].
template <int MT, int NA, int KW>
__device__ __forceinline__ void reduce_over_warps(float (&acc)[MT][NA],
                                                  float (&s_red)[KW > 1 ? kWarpsPerCta : 1][MT][NA][32]) {
  if constexpr (KW > 1) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int q = 0; q < NA; ++q) s_red[warp][mt][q][lane] = acc[mt][q];
    __syncthreads();
    if (warp % KW == 0)
      for (int w = 1; w < KW; ++w)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int q = 0; q < NA; ++q) acc[mt][q] += s_red[warp + w][mt][q][lane];
  }
}

// PERS: the tile after `tile` for this CTA (tiles: the grid's count; beyond it: none), with its first stages
// loaded (load_first, after n0 is its first row for this warp: rows_per_cta per tile, warp_row0 the warp's offset)
// so that they are in flight during this tile's reduction and stores. Plain grids: `tiles` (none).
template <bool PERS, class LoadFirst>
__device__ __forceinline__ int next_tile(int tile, int tiles, int rows_per_cta, int warp_row0, int& n0,
                                         LoadFirst&& load_first) {
  if constexpr (!PERS) {
    return tiles;
  } else {
    const int next = tile + static_cast<int>(gridDim.x);
    if (next < tiles) {
      n0 = next * rows_per_cta + warp_row0;
      load_first();
    }
    return next;
  }
}

}  // namespace a8_detail

// The launch of an a8 kernel over n rows, rows_per_cta a CTA (PERS: a grid of at most the CTAs resident at once,
// in the decode steps' shared-memory configuration), with `smem` bytes of dynamic shared memory, through PDL.
template <bool PERS, class Kernel>
cudaError_t launch_a8_grid(Kernel kernel, const SkinnyGemmParams& p, int rows_per_cta, size_t smem,
                           cudaStream_t stream) {
  int ctas = (p.n + rows_per_cta - 1) / rows_per_cta;
  if constexpr (PERS) {
    if (const cudaError_t e = use_decode_carveout(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
    int resident = 0;
    if (const cudaError_t e = resident_ctas(reinterpret_cast<const void*>(kernel), a8_detail::kThreads, smem,
                                            kDecodeCarveoutPercent, &resident);
        e != cudaSuccess)
      return e;
    ctas = std::min(ctas, resident);
  }
  return launch_pdl_decode(kernel, dim3(ctas), dim3(a8_detail::kThreads), smem, stream, p);
}

}  // namespace mopt::cuda
