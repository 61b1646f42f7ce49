// The skinny GEMM on the f16 tensor cores for 8-bit weights (launch_skinny_gemm's variants kQuantSkinnyVariants
// and up of kFp8 and per-channel kInt8; gemm_skinny.cu validates and dispatches; one translation unit per format:
// gemm_skinny_mma_{fp8,int8}.cu). Same contract as the CUDA-core kernel of gemm_skinny.cuh: y[m, n] =
// x[m, k] . w[n, k]^T * row_scale[n] for m <= 8, with the RMSNorm / SwiGLU prologues and the residual epilogue,
// PDL and the L2 prefetch.
//
// Why: the CUDA-core kernel converts every weight to fp32 (E4M3 -> f16 -> fp32; int8 by a byte permute and a
// subtraction) and does one fp32 FMA per weight and activation row; for fp8 its conversions run on a narrow pipe,
// so fp8 stays well below the copy bandwidth. Here an E4M3 weight costs half a cvt.rn.f16x2.e4m3x2 and an int8
// weight half a byte permute and half an f16x2 subtraction (both exact: every E4M3 and int8 value is an f16
// value), and the products are mma.sync.m16n8k16 f16 x f16 -> fp32 (exact products summed in fp32), so the
// arithmetic per weight byte is ~1/8 of a tensor-core instruction, whatever m (<= 8) is.
//
// Layout. A warp owns MT tiles of 16 consecutive output features (mma A = weights, 16 rows x 16 inputs;
// B = activations, 16 inputs x 8 tokens, the m <= 8 rows padded with zeros; D = 16 features x 8 tokens).
// The dot product does not depend on the order of k, so the fragments use a permutation of k that lets every
// lane read its weights with one 16-byte load per row: lane (g = lane / 4, t = lane % 4) at step s reads the
// 16-byte chunk c = 4 s + t (inputs [16 c, 16 c + 16)) of feature rows g and g + 8 of each tile, and the
// activations of token g at the same 16 inputs. Word w of the chunk (inputs 4 w .. 4 w + 3) becomes two f16x2
// (inputs 4 w, 4 w + 1 and 4 w + 2, 4 w + 3), and mma j (0..3) takes pair 2 j as the fragment's "columns
// 2t, 2t+1" and pair 2 j + 1 as "2t + 8, 2t + 9", for A (rows g, g + 8) and B (token g) alike. So one step
// of a quad covers 64 contiguous bytes of each of its rows, and four mma per tile and chunk.
// KW warps of a group split k (warp kw takes steps kw, kw + KW, ...: the group reads 64 KW contiguous bytes per
// row and step), reduced through shared memory in a fixed order (deterministic). A stage = U steps of loads.
//
// Activations in f16: the prologue's fp32 value (bf16 x; x_f32 * norm_w, the 1/rms applied to the result as in
// the CUDA-core kernel; silu(gate) * up) times kXScale = 2^-4, rounded to f16, and the result is divided by
// kXScale (exact). f16 then holds |x| up to 2^20 without overflow (the residual stream's outliers are far below)
// with 11 significant bits (bf16 inputs exactly, down to |x| = 2^-10), and an absolute error <= 2^-21 below
// that: the same W8A16 arithmetic as the CUDA-core kernel up to a 2^-11 relative rounding of each activation.
#pragma once

#include <cuda_fp16.h>

#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
namespace skinny_mma {
using namespace skinny_detail;

constexpr float kXScale = 0.0625f;  // 2^-4: see above

// Weight codes -> the A fragment: C::pairs(word, lo, hi) turns the four codes of a 32-bit word (byte e = input e)
// into two f16x2, lo = inputs (0, 1) and hi = (2, 3) (low half first), exactly.
struct MmaFp8 {  // E4M3: two hardware pair conversions (quant_formats.cuh)
  __device__ static void pairs(uint32_t w, uint32_t& lo, uint32_t& hi) { e4m3x4_to_f16x2(w, lo, hi); }
};
struct MmaInt8 {  // int8 q: the byte q + 128 under the f16 1024 (0x64..) is 1152 + q exactly; minus 1152 (0x6480)
  __device__ static void pairs(uint32_t w, uint32_t& lo, uint32_t& hi) {
    const uint32_t biased = w ^ 0x80808080u;
    lo = __byte_perm(biased, 0x64646464u, 0x4140);  // bytes: code 0, 0x64, code 1, 0x64
    hi = __byte_perm(biased, 0x64646464u, 0x4342);
    asm("sub.f16x2 %0, %0, %2;\n\tsub.f16x2 %1, %1, %2;" : "+r"(lo), "+r"(hi) : "r"(0x64806480u));
  }
};

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// d += a . b: m16n8k16, A row-major f16 (a0: row g cols 2t..; a1: row g+8; a2: row g cols 2t+8..; a3: row g+8),
// B col-major f16 (b0: rows 2t, 2t+1 of col g; b1: rows 2t+8, 2t+9), D fp32 (d0, d1: row g cols 2t, 2t+1;
// d2, d3: row g + 8).
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// E consecutive bf16 / fp32 values from src (E = 2: one 4- or 8-byte load; E = 16: 16-byte loads) as fp32.
template <int E>
__device__ __forceinline__ void ld_bf16(const bf16* src, float (&out)[E]) {
  if constexpr (E == 2) {
    const float2 f = __bfloat1622float2(__ldg(reinterpret_cast<const __nv_bfloat162*>(src)));
    out[0] = f.x;
    out[1] = f.y;
  } else {
#pragma unroll
    for (int q = 0; q < E / 8; ++q) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(src) + q), out + 8 * q);
  }
}
template <int E>
__device__ __forceinline__ void ld_f32(const float* src, float (&out)[E]) {
  if constexpr (E == 2) {
    const float2 f = __ldg(reinterpret_cast<const float2*>(src));
    out[0] = f.x;
    out[1] = f.y;
  } else {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(src) + q);
      out[4 * q] = f.x;
      out[4 * q + 1] = f.y;
      out[4 * q + 2] = f.z;
      out[4 * q + 3] = f.w;
    }
  }
}

// The E operand values of input row `row` at inputs [j, j + E) after the prologue, times kXScale, as E / 2 f16x2
// in input order. kNorm: ss accumulates their squares (the row's sum of squares).
template <int PRO, int E>
__device__ __forceinline__ void load_x(const SkinnyGemmParams& p, int64_t row, int j, uint32_t (&xb)[E / 2],
                                       float& ss) {
  float v[E];
  if constexpr (PRO == kNorm) {
    float nw[E];
    ld_f32<E>(p.x_f32 + row * p.k + j, v);
    ld_bf16<E>(p.norm_w + j, nw);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      ss = fmaf(v[e], v[e], ss);
      v[e] = v[e] * nw[e] * kXScale;
    }
  } else if constexpr (PRO == kSwiGlu) {
    const bf16* src = p.x + row * 2 * p.k + j;  // gate | up, each k wide
    float u[E];
    ld_bf16<E>(src, v);
    ld_bf16<E>(src + p.k, u);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = silu_fast(v[e]) * (u[e] * kXScale);
  } else {
    ld_bf16<E>(p.x + row * p.k + j, v);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] *= kXScale;
  }
#pragma unroll
  for (int i = 0; i < E / 2; ++i) xb[i] = pack_f16x2(v[2 * i], v[2 * i + 1]);
}

// MT: 16-feature tiles per warp, U: steps per stage (2 MT U 16-byte weight loads per lane), KW: warps per group
// sharing k, NB: stages in flight (1: a stage's loads are issued just before its arithmetic; NB > 1: a ring of NB
// register buffers, the one just consumed refilled with the stage NB ahead, so 2 MT U NB loads per lane are in
// flight, and the first NB stages are issued before the PDL wait). A CTA of 8 warps covers 16 MT 8 / KW
// features. X1 (m = 1): the activations of a step are computed once, a pair per lane, and quad 0 gathers its 16
// by shuffles (without X1 every lane computes the 16 of its token, 8x the prologue work at m = 1: SwiGLU's exp and
// divide, RMSNorm's loads). XS (with X1): instead the CTA computes the whole row once after the PDL wait into
// shared memory as f16 (s_x, k / 2 words: dynamic shared memory of 2 k bytes), so the stages read no global
// activations and wait on no L2 round trip of theirs; RMSNorm's sum of squares is then the CTA's (each thread's
// pairs, reduced over the CTA), not the group's.
template <class C, int MT, int U, int KW, int NB, bool X1, bool XS, int PRO, int EPI>
__global__ void __launch_bounds__(kWarpsPerCta * 32) skinny_mma_kernel(SkinnyGemmParams p) {
  constexpr int kGroups = kWarpsPerCta / KW;
  constexpr int kRows = 16 * MT;  // output features per group
  constexpr int kStage = KW * U;  // steps of the group per stage
  constexpr int kBufs = NB;  // stages in flight
  static_assert(NB >= 1, "at least one stage");
  static_assert(X1 || !XS, "staged activations: m = 1 only");
  extern __shared__ uint4 s_xdyn[];  // XS: [k / 16][2] uint4 = the row's f16 pairs, chunk c at s_xdyn[2 c]
  __shared__ float s_red[KW > 1 || XS ? kWarpsPerCta : 1][5][32];  // per warp and lane: one tile's D fragment, ss
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = warp / KW, kw = warp % KW;
  const int n0 = (blockIdx.x * kGroups + group) * kRows;
  const int chunks = n0 < p.n ? p.k / 16 : 0;  // groups past the end stream nothing (but reach every barrier)
  const int steps = (chunks + 3) / 4;
  const char* wbase = static_cast<const char*>(p.qw.codes);
  const int64_t row_bytes = p.k;

  const uint4* wrow[MT][2];  // feature rows g and g + 8 of each tile (clamped)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wrow[mt][h] = reinterpret_cast<const uint4*>(wbase + min(n0 + 16 * mt + 8 * h + g, p.n - 1) * row_bytes);
  uint4 wbuf[kBufs][U][MT][2];
  auto load_w = [&](auto& wv, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = 4 * (s0 + u * KW) + t;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[u][mt][h] = c < chunks ? load_stream(wrow[mt][h] + c) : make_uint4(0, 0, 0, 0);
    }
  };
  pdl_trigger();  // as in the CUDA-core kernel: weights only before the wait
#pragma unroll
  for (int b = 0; b < kBufs; ++b) load_w(wbuf[b], kw + b * kStage);  // stages past the end: zeros, no loads
  if (kw == 0 && n0 < p.n) {
    const uint32_t rb = static_cast<uint32_t>(row_bytes);
    const uint32_t start = min(rb, 64u * kStage * kBufs);
    const uint32_t len = min(p.l2_prefetch_bytes / static_cast<uint32_t>(p.n), rb - start) & ~15u;
    for (int r = lane; r < kRows && n0 + r < p.n && len > 0; r += 32)
      prefetch_l2(wbase + static_cast<int64_t>(n0 + r) * row_bytes + start, len);
  }
  pdl_wait();

  const bool has_x = g < p.m;  // token g of the B fragment: a real row, or zero padding
  const int xtok = X1 ? 0 : (has_x ? g : 0);
  const int64_t xrow = p.x_rows ? p.x_rows[xtok] : xtok;
  float acc[MT][4], ss = 0.f;
  if constexpr (XS) {  // the row once per CTA: thread i takes pairs i, i + 256, ...; ss: the CTA's total
    uint32_t* s_x = reinterpret_cast<uint32_t*>(s_xdyn);
#pragma unroll 4
    for (int i = threadIdx.x; i < p.k / 2; i += kWarpsPerCta * 32) {
      uint32_t mine[1];
      load_x<PRO, 2>(p, xrow, 2 * i, mine, ss);
      s_x[i] = mine[0];
    }
    if constexpr (PRO == kNorm) {
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) s_red[warp][4][0] = ss;  // s_red is reused below only after a barrier
      __syncthreads();
      ss = 0.f;
      for (int w = 0; w < kWarpsPerCta; ++w) ss += s_red[w][4][0];  // fixed order
    }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[mt][q] = 0.f;

  // Stage hb of an iteration (NB of them) covers steps s0 + u KW; with NB > 1 the buffer just consumed is
  // refilled with the stage NB ahead, so NB - 1 stages' loads are in flight during a stage's arithmetic.
  for (int s0i = kw; s0i < steps; s0i += kBufs * kStage) {
#pragma unroll
    for (int hb = 0; hb < kBufs; ++hb) {
      const int s0 = s0i + hb * kStage;
      if (s0 >= steps) break;
      if (NB == 1 && s0 != kw) load_w(wbuf[hb], s0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = 4 * (s0 + u * KW) + t;
        if (s0 + u * KW >= steps) break;
        uint32_t xb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if constexpr (XS) {  // B columns g > 0 get copies (never stored)
          if (c < chunks) {
            const uint4 lo = s_xdyn[2 * c], hi = s_xdyn[2 * c + 1];
            xb[0] = lo.x, xb[1] = lo.y, xb[2] = lo.z, xb[3] = lo.w, xb[4] = hi.x, xb[5] = hi.y, xb[6] = hi.z,
            xb[7] = hi.w;
          }
        } else if constexpr (X1) {  // lane 8 t' + i: pair i of chunk 4 s + t'; B columns g > 0 get copies
          const int cl = c - t + lane / 8;
          uint32_t mine[1] = {0};
          if (cl < chunks) load_x<PRO, 2>(p, xrow, 16 * cl + 2 * (lane % 8), mine, ss);
#pragma unroll
          for (int i = 0; i < 8; ++i) xb[i] = __shfl_sync(0xffffffffu, mine[0], 8 * t + i);
        } else if (has_x && c < chunks) {
          load_x<PRO, 16>(p, xrow, 16 * c, xb, ss);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t a[2][8];  // rows g, g + 8: pair i = inputs 16 c + 2 i, + 1 as f16x2
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t* wd = reinterpret_cast<const uint32_t*>(&wbuf[hb][u][mt][h]);
#pragma unroll
            for (int w = 0; w < 4; ++w) C::pairs(wd[w], a[h][2 * w], a[h][2 * w + 1]);
          }
#pragma unroll
          for (int j = 0; j < 4; ++j)
            mma_f16(acc[mt], a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], xb[2 * j],
                    xb[2 * j + 1]);
        }
      }
      if (NB > 1 && s0 + NB * kStage < steps) load_w(wbuf[hb], s0 + NB * kStage);
    }
  }

  // ss of token g over this warp's chunks: the quad's four lanes (X1: token 0's, over all 32 lanes).
  if constexpr (PRO == kNorm && !XS) {  // (XS: every thread holds the row's total already)
#pragma unroll
    for (int o = 1; o < (X1 ? 32 : 4); o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  if constexpr (KW > 1) {  // fixed-order sum over the group's KW warps, one tile at a time
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (mt > 0) __syncthreads();  // the previous tile's reads are done
#pragma unroll
      for (int q = 0; q < 4; ++q) s_red[warp][q][lane] = acc[mt][q];
      if (mt == 0) s_red[warp][4][lane] = XS ? 0.f : ss;  // XS: kw 0's ss is the total
      __syncthreads();
      if (kw == 0)
        for (int w = 1; w < KW; ++w) {
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[mt][q] += s_red[warp + w][q][lane];
          if (mt == 0) ss += s_red[warp + w][4][lane];
        }
    }
    if (kw != 0) return;
  }

  if (n0 >= p.n) return;
  float out_scale[2];  // tokens 2t, 2t + 1: 1 / kXScale, times 1 / rms (kNorm)
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    out_scale[e] = 1.f / kXScale;
    if constexpr (PRO == kNorm) {
      const float tss = __shfl_sync(0xffffffffu, ss, 4 * (2 * t + e));  // token 2t + e's sum: quad 2t + e
      out_scale[e] *= rsqrtf(tss / static_cast<float>(p.k) + p.norm_eps);
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int n = n0 + 16 * mt + g + (q >= 2 ? 8 : 0), i = 2 * t + (q & 1);
      if (n >= p.n || i >= p.m) continue;
      store_out<EPI>(p, i, n, acc[mt][q] * out_scale[q & 1] * __ldg(p.qw.row_scale + n));
    }
}

constexpr int kMaxStagedK = 16384;  // XS: 2 k = 32 KiB of f16 row at most (+ 5 KiB s_red: under the 48 KiB default)

// XS: the m = 1 row staged in shared memory where k <= kMaxStagedK, else (and for m > 1) the same tiling without.
template <class C, int MT, int U, int KW, int NB, bool XS, int PRO, int EPI>
cudaError_t launch_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int rows_per_cta = kWarpsPerCta / KW * 16 * MT;
  const dim3 grid((p.n + rows_per_cta - 1) / rows_per_cta);
  if constexpr (XS) {
    if (p.m == 1 && p.k <= kMaxStagedK)
      return launch_pdl_decode(skinny_mma_kernel<C, MT, U, KW, NB, true, true, PRO, EPI>, grid,
                               dim3(kWarpsPerCta * 32), 2 * static_cast<size_t>(p.k), stream, p);
  }
  if (p.m == 1)
    return launch_pdl_decode(skinny_mma_kernel<C, MT, U, KW, NB, true, false, PRO, EPI>, grid,
                             dim3(kWarpsPerCta * 32), 0, stream, p);
  return launch_pdl_decode(skinny_mma_kernel<C, MT, U, KW, NB, false, false, PRO, EPI>, grid,
                           dim3(kWarpsPerCta * 32), 0, stream, p);
}

// Tilings (MT, U, KW) xNB of variant kQuantSkinnyVariants + i; features per CTA = 128 MT / KW, 16-byte loads per
// lane in flight = 2 MT U NB (NB = 1 when not written). KW = 8: a CTA is one group of 16 MT features (qkv:
// 384 / MT CTAs, down: 256 / MT); larger MT shares each activation chunk's prologue and conversion over more rows.
//   0 = (1, 4, 8), 1 = (2, 2, 8), 2 = (2, 4, 8), 3 = (1, 8, 8)      one group per CTA
//   4 = (1, 4, 4), 5 = (2, 4, 4), 6 = (4, 2, 8), 7 = (4, 2, 4)      two groups per CTA, or 64 features a group
//   8 = (1, 4, 8)x2, 9 = (2, 2, 8)x2      the next stage's loads in flight during a stage's arithmetic
//   10 = (1, 2, 8)x4, 11 = (1, 1, 8)x8, 12 = (2, 1, 8)x4, 13 = (1, 2, 4)x4, 14 = (1, 4, 4)x3, 15 = (1, 2, 2)x4
//        deeper rings of 16-24 loads per lane (64-96 buffer registers): 12-21 stay in flight during a stage's
//        arithmetic where 8 and 9 keep 8 (long rows: down, k = 14336, is 28 steps a warp at KW = 8), and at
//        k = 4096 (8 steps a warp at KW = 8, 16 at KW = 4) most or all of a warp's loads precede the PDL wait
//   16 = (1, 4, 8)s, 17 = (1, 8, 8)s, 18 = (1, 2, 8)x4s, 19 = (1, 1, 8)x8s      "s": XS at m = 1, k <= 16384 (the
//        stages wait on no activation loads; m > 1: the same as 0, 3, 10, 11)
template <class C, int PRO, int EPI>
cudaError_t dispatch_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  switch (p.variant - kQuantSkinnyVariants) {
    case 0: return launch_mma<C, 1, 4, 8, 1, false, PRO, EPI>(p, stream);
    case 1: return launch_mma<C, 2, 2, 8, 1, false, PRO, EPI>(p, stream);
    case 2: return launch_mma<C, 2, 4, 8, 1, false, PRO, EPI>(p, stream);
    case 3: return launch_mma<C, 1, 8, 8, 1, false, PRO, EPI>(p, stream);
    case 4: return launch_mma<C, 1, 4, 4, 1, false, PRO, EPI>(p, stream);
    case 5: return launch_mma<C, 2, 4, 4, 1, false, PRO, EPI>(p, stream);
    case 6: return launch_mma<C, 4, 2, 8, 1, false, PRO, EPI>(p, stream);
    case 7: return launch_mma<C, 4, 2, 4, 1, false, PRO, EPI>(p, stream);
    case 8: return launch_mma<C, 1, 4, 8, 2, false, PRO, EPI>(p, stream);
    case 9: return launch_mma<C, 2, 2, 8, 2, false, PRO, EPI>(p, stream);
    case 10: return launch_mma<C, 1, 2, 8, 4, false, PRO, EPI>(p, stream);
    case 11: return launch_mma<C, 1, 1, 8, 8, false, PRO, EPI>(p, stream);
    case 12: return launch_mma<C, 2, 1, 8, 4, false, PRO, EPI>(p, stream);
    case 13: return launch_mma<C, 1, 2, 4, 4, false, PRO, EPI>(p, stream);
    case 14: return launch_mma<C, 1, 4, 4, 3, false, PRO, EPI>(p, stream);
    case 15: return launch_mma<C, 1, 2, 2, 4, false, PRO, EPI>(p, stream);
    case 16: return launch_mma<C, 1, 4, 8, 1, true, PRO, EPI>(p, stream);
    case 17: return launch_mma<C, 1, 8, 8, 1, true, PRO, EPI>(p, stream);
    case 18: return launch_mma<C, 1, 2, 8, 4, true, PRO, EPI>(p, stream);
    default: return launch_mma<C, 1, 1, 8, 8, true, PRO, EPI>(p, stream);
  }
}
static_assert(kMmaVariants == 20, "dispatch_mma lists every tiling");

}  // namespace skinny_mma

// The tensor-core skinny GEMM with weight codes C, p validated and p.variant >= kQuantSkinnyVariants.
template <class C>
cudaError_t launch_skinny_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return skinny_detail::with_pair(p, [&](auto pro, auto epi) {
    return skinny_mma::dispatch_mma<C, decltype(pro)::value, decltype(epi)::value>(p, stream);
  });
}

}  // namespace mopt::cuda
