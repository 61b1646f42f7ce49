// The skinny GEMM on the tensor cores (launch_skinny_gemm's variants kQuantSkinnyVariants and up of kFp8, kInt8 (per
// channel or grouped) and kNib4 on the f16 ones, and kSkinnyVariants and up of bf16 weights on the bf16 ones;
// gemm_skinny.cu validates and dispatches; one translation unit per code type:
// gemm_skinny_mma_{bf16,fp8,int8,int8g,nib4,nib4s}.cu). Same contract as the CUDA-core kernel of
// gemm_skinny.cuh: y[m, n] = x[m, k] . w[n, k]^T (* row_scale[n]) for m <= 8, with the RMSNorm / SwiGLU prologues
// and the residual epilogue, PDL and the L2 prefetch.
//
// Why: the CUDA-core kernel converts every weight to fp32 (E4M3 -> f16 -> fp32; int8 by a byte permute and a
// subtraction) and does one fp32 FMA per weight and activation row; for fp8 its conversions run on a narrow pipe,
// so fp8 stays well below the copy bandwidth. Here an E4M3 weight costs half a cvt.rn.f16x2.e4m3x2 and an int8
// weight half a byte permute and half an f16x2 subtraction (both exact: every E4M3 and int8 value is an f16
// value), and the products are mma.sync.m16n8k16 f16 x f16 -> fp32 (exact products summed in fp32), so the
// arithmetic per weight byte is ~1/8 of a tensor-core instruction, whatever m (<= 8) is.
//
// Grouped codes (kInt8 with groups: Q8_0, Q6_K, Q5_x; kNib4: Q4_0, Q4_K, AWQ): one mma sums k over four lanes'
// chunks, which may belong to different groups, so a group's (a, b) enters the weights before the mma: the exact
// code q as f16 (int8: as above; 4-bit: the nibble under the f16 1024, (q | 0x6400) = 1024 + q, minus 1024, and
// the high nibble (1024 + 16 q) / 16 - 64, one lop3 and one f16x2 op a pair), then one fma.rn.f16x2 per pair,
// w' = a' q + b' with a' = f16(a), b' = f16(b) converted once per chunk and row. Not the single
// a' (1024 + q) + (b - 1024 a') (one op less): f16(b - 1024 a') errs by up to |a| / 2, half a quantization step.
// Error per weight (u = 2^-11, f16's unit roundoff; 2^-25 its subnormal half-step):
//   |w' - w| <= u (1 + u) (|a q| + |b| + |w|) + (|q| + 3) 2^-25
// (the roundings of a, b and of the fma's result), 2^-11 relative of w for b = 0 (Q8_0, Q6_K) up to the rounding
// of a, and a few 2^-11 of |a| for 4-bit codes with an offset (|a q| + |b| <= ~24 |a|: ~1% of a step).
//
// Layout. A warp owns MT tiles of 16 consecutive output features (mma A = weights, 16 rows x 16 inputs;
// B = activations, 16 inputs x 8 tokens, the m <= 8 rows padded with zeros; D = 16 features x 8 tokens).
// The dot product does not depend on the order of k, so the fragments use a permutation of k that lets every
// lane read its weights with one 16-byte load per row: lane (g = lane / 4, t = lane % 4) at step s reads the
// 16-byte chunk c = 4 s + t (C::kElems = 16 or 32 inputs) of feature rows g and g + 8 of each tile, and the
// activations of token g at the same inputs. The chunk becomes kElems / 2 f16x2 "pairs" (C's pair order: 8-bit
// codes: pair i = inputs 2 i, 2 i + 1; 4-bit codes: word w gives pairs 4 w .. 4 w + 3 = inputs (4w, 4w+2),
// (4w+1, 4w+3), (16+4w, 18+4w), (17+4w, 19+4w), what a mask of the low / high nibbles of the word and of the word
// >> 8 yields), and mma j takes pair 2 j as the fragment's "columns 2t, 2t+1" and pair 2 j + 1 as "2t + 8,
// 2t + 9", for A (rows g, g + 8) and B (token g) alike; the activations are put in the same order (C::x_unit: a
// byte permute per two pairs for 4-bit codes). So one step of a quad covers 64 contiguous bytes of each of its
// rows, and kElems / 4 mma per tile and chunk.
// KW warps of a group split k (warp kw takes steps kw, kw + KW, ...: the group reads 64 KW contiguous bytes per
// row and step), reduced through shared memory in a fixed order (deterministic). A stage = U steps of loads
// (with groups: also each chunk's (a, b), 4 or 8 bytes a row, from L1 / L2).
//
// Rows. Every output row gets the bits of a one-row call of the same tiling (speculative verification rows must
// reproduce plain decoding's: skinny_reduction_order): the activations of each row are computed as at m = 1 (the
// X1 scheme below: a unit of C's pair order per lane, the pairs gathered by shuffles), the RMSNorm sum of squares
// of each row summed in the one-row order (per lane over its units, over the 32 lanes by shuffles, over the KW
// warps in order; XS tilings: over the CTA as their staging pass sums it), and a D column depends only on its
// own B column. Only the work grows with m: m units per lane and step, and m shuffles per pair.
//
// bf16 weights (MmaBf16): the weights enter mma.m16n8k16 bf16 x bf16 as they are, and each activation as two
// bf16 parts, hi = bf16(x) and lo = bf16(x - hi) (two mma a step: x to ~2^-17 relative, near the CUDA-core
// kernel's fp32 operand); no kXScale (bf16 has fp32's range).
//
// Activations in f16: the prologue's fp32 value (bf16 x; x_f32 * norm_w, the 1/rms applied to the result as in
// the CUDA-core kernel; silu(gate) * up) times kXScale = 2^-4, rounded to f16, and the result is divided by
// kXScale (exact). f16 then holds |x| up to 2^20 without overflow (the residual stream's outliers are far below)
// with 11 significant bits (bf16 inputs exactly, down to |x| = 2^-10), and an absolute error <= 2^-21 below
// that: the same W8A16 arithmetic as the CUDA-core kernel up to a 2^-11 relative rounding of each activation.
#pragma once

#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/func_attr.h"
#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
namespace skinny_mma {
using namespace skinny_detail;

constexpr float kXScale = 0.0625f;  // 2^-4: see above

// Weight codes -> the A fragment. A code type C describes a 16-byte chunk:
//   kElems     inputs per chunk (8: bf16; 16: a byte each; 32: 4-bit codes); kElems / 2 pairs, kElems / 8 per
//              32-bit word
//   kBf16      bf16 weights: bf16 mma, activations as hi + lo bf16 parts; else f16 mma, activations times
//              kScale (kXScale) in f16
//   kGrouped   pairs() gives the exact codes q and the group's (a, b) is applied to them (see above); kAffine:
//              the groups always hold (a, b) (else QuantWeightView::affine decides)
//   pairs(word, out)   word w's codes as f16x2 (bf16: bf16x2) pairs kElems / 8 w .. (the pair order above),
//                      exactly
// and, through its pair order (Bf16Pairs / BytePairs / NibblePairs), where the activations go: the kElems / 2
// natural pairs (inputs 2 i, 2 i + 1) of a chunk form kUnits "units" of L = kElems / (2 kUnits) pairs (8 units,
// bf16: 4, so lanes 8 t' + 4 .. 8 t' + 7 compute none);
// x_unit(nat, out) reorders unit q's pairs into the chunk's pairs x_pos(q) .. + L - 1, and pair i comes from unit
// x_unit_of(i), slot x_reg_of(i).
struct BytePairs {  // pair i = inputs (2 i, 2 i + 1): the natural order
  static constexpr int kElems = 16, kUnits = 8;
  static constexpr bool kBf16 = false, kStepGroups = false;
  static constexpr float kScale = kXScale;
  __host__ __device__ static constexpr int x_pos(int q) { return q; }
  __host__ __device__ static constexpr int x_unit_of(int i) { return i; }
  __host__ __device__ static constexpr int x_reg_of(int) { return 0; }
  __device__ static void x_unit(const uint32_t (&nat)[1], uint32_t (&out)[1]) { out[0] = nat[0]; }
};
struct NibblePairs {  // unit q = inputs 4 q .. 4 q + 3 -> (4q, 4q+2), (4q+1, 4q+3) at pairs 4 q (q < 4), 4 (q-4) + 2
  static constexpr int kElems = 32, kUnits = 8;
  static constexpr bool kBf16 = false, kStepGroups = false;
  static constexpr float kScale = kXScale;
  __host__ __device__ static constexpr int x_pos(int q) { return q < 4 ? 4 * q : 4 * (q - 4) + 2; }
  __host__ __device__ static constexpr int x_unit_of(int i) { return (i & 2) ? 4 + i / 4 : i / 4; }
  __host__ __device__ static constexpr int x_reg_of(int i) { return i & 1; }
  __device__ static void x_unit(const uint32_t (&nat)[2], uint32_t (&out)[2]) {
    out[0] = __byte_perm(nat[0], nat[1], 0x5410);  // low halves: inputs 4q, 4q + 2
    out[1] = __byte_perm(nat[0], nat[1], 0x7632);  // high halves: 4q + 1, 4q + 3
  }
};

struct Bf16Pairs : BytePairs {  // 8 bf16 inputs: 4 natural pairs, a unit each
  static constexpr int kElems = 8, kUnits = 4;
  static constexpr bool kBf16 = true;
  static constexpr float kScale = 1.f;
};
struct MmaBf16 : Bf16Pairs {  // the weights as they are
  static constexpr bool kGrouped = false, kAffine = false;
  __device__ static void pairs(uint32_t w, uint32_t (&out)[1]) { out[0] = w; }
};
struct MmaFp8 : BytePairs {  // E4M3: two hardware pair conversions (quant_formats.cuh)
  static constexpr bool kGrouped = false, kAffine = false;
  __device__ static void pairs(uint32_t w, uint32_t (&out)[2]) { e4m3x4_to_f16x2(w, out[0], out[1]); }
};
struct MmaInt8 : BytePairs {  // int8 q: the byte q + 128 under the f16 1024 (0x64..) is 1152 + q exactly; minus 1152
  static constexpr bool kGrouped = false, kAffine = false;
  __device__ static void pairs(uint32_t w, uint32_t (&out)[2]) {
    const uint32_t biased = w ^ 0x80808080u;
    out[0] = __byte_perm(biased, 0x64646464u, 0x4140);  // bytes: code 0, 0x64, code 1, 0x64
    out[1] = __byte_perm(biased, 0x64646464u, 0x4342);
    asm("sub.f16x2 %0, %0, %2;\n\tsub.f16x2 %1, %1, %2;" : "+r"(out[0]), "+r"(out[1]) : "r"(0x64806480u));
  }
};
struct MmaInt8Grouped : MmaInt8 {  // the same exact codes, then a q (+ b) per group
  static constexpr bool kGrouped = true;
};
struct MmaNib4 : NibblePairs {  // 4-bit codes (byte j: input j low, j + 16 high), a q + b per group
  static constexpr bool kGrouped = true, kAffine = true;
  __device__ static void pairs(uint32_t w, uint32_t (&out)[4]) {
    const uint32_t sh = w >> 8;  // bytes 1, 3 in the places of bytes 0, 2
    out[0] = (w & 0x000f000fu) | 0x64006400u;  // 1024 + q: inputs 4w, 4w + 2 (bytes 0, 2, low nibbles)
    out[1] = (sh & 0x000f000fu) | 0x64006400u;  // inputs 4w + 1, 4w + 3
    out[2] = (w & 0x00f000f0u) | 0x64006400u;  // 1024 + 16 q: inputs 16 + 4w, 18 + 4w (high nibbles)
    out[3] = (sh & 0x00f000f0u) | 0x64006400u;  // inputs 17 + 4w, 19 + 4w
    asm("sub.f16x2 %0, %0, %2;\n\tsub.f16x2 %1, %1, %2;" : "+r"(out[0]), "+r"(out[1]) : "r"(0x64006400u));
    // (1024 + 16 q) / 16 - 64 = q: 2^-4 = 0x2C00, -64 = 0xD400 (an exact product, one exact rounding)
    asm("fma.rn.f16x2 %0, %0, %2, %3;\n\tfma.rn.f16x2 %1, %1, %2, %3;"
        : "+r"(out[2]), "+r"(out[3])
        : "r"(0x2C002C00u), "r"(0xD400D400u));
  }
};
// 4-bit codes in groups of 128 inputs or more (AWQ): a step of a quad (chunks 4 s .. 4 s + 3, 128 inputs) lies in
// one group of each row, so the group's (a, b) scales the step's dot products instead of every weight:
// sum w x = a sum q x + b sum x. The codes enter the mma as the f16 bit patterns they already are under a mask,
// subnormal and exact: a low nibble q is q 2^-24, a high nibble 16 q 2^-24; the low and the high pairs go to
// two accumulators, sum q x = 2^24 (lo + hi / 16) (products exact, sums in fp32; no rounding of a q + b to f16),
// and sum x per token comes from mma with A = 1. Per word: a shift and 4 masks, where MmaNib4 adds 2 f16x2
// subtractions / fma, 4 group fma and the group's f16 conversions.
struct MmaNib4Step : NibblePairs {
  static constexpr bool kGrouped = true, kAffine = true, kStepGroups = true;
  __device__ static void pairs(uint32_t w, uint32_t (&out)[4]) {
    const uint32_t sh = w >> 8;
    out[0] = w & 0x000f000fu;   // q 2^-24: inputs 4w, 4w + 2
    out[1] = sh & 0x000f000fu;  // inputs 4w + 1, 4w + 3
    out[2] = w & 0x00f000f0u;   // 16 q 2^-24: inputs 16 + 4w, 18 + 4w
    out[3] = sh & 0x00f000f0u;  // inputs 17 + 4w, 19 + 4w
  }
};

// a * b + c on f16x2 (round to nearest, subnormals kept).
__device__ __forceinline__ uint32_t fma_f16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

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

// d += a . b: m16n8k16 with bf16 operands, the fragments as in mma_f16.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two activation values as C's B operand: f16x2 (hi; lo unused), or bf16x2 hi and the bf16x2 of the remainders.
template <class C>
__device__ __forceinline__ void pack_x(float a, float b, uint32_t& hi, uint32_t& lo) {
  if constexpr (C::kBf16) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&l);
  } else {
    hi = pack_f16x2(a, b);
    lo = 0;
  }
}

// acc += the tile's rows (a0..a3, C's A fragment) times the B columns (x0, x1; bf16: plus the remainders l0, l1).
template <class C>
__device__ __forceinline__ void mma_step(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t x0, uint32_t x1, uint32_t l0, uint32_t l1) {
  if constexpr (C::kBf16) {
    mma_bf16(acc, a0, a1, a2, a3, x0, x1);
    mma_bf16(acc, a0, a1, a2, a3, l0, l1);
  } else {
    mma_f16(acc, a0, a1, a2, a3, x0, x1);
  }
}

// E consecutive bf16 / fp32 values from src (E = 2, 4: one 4-16 byte load; E = 8 q: 16-byte loads) as fp32.
template <int E>
__device__ __forceinline__ void ld_bf16(const bf16* src, float (&out)[E]) {
  static_assert(E == 2 || E == 4 || E % 8 == 0, "2, 4 or a multiple of 8 values");
  if constexpr (E == 2) {
    const float2 f = __bfloat1622float2(__ldg(reinterpret_cast<const __nv_bfloat162*>(src)));
    out[0] = f.x;
    out[1] = f.y;
  } else if constexpr (E == 4) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(src));
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
  } else {
#pragma unroll
    for (int q = 0; q < E / 8; ++q) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(src) + q), out + 8 * q);
  }
}
template <int E>
__device__ __forceinline__ void ld_f32(const float* src, float (&out)[E]) {
  static_assert(E == 2 || E % 4 == 0, "2 or a multiple of 4 values");
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

// The E operand values of input row `row` at inputs [j, j + E) after the prologue, times C::kScale, as E / 2
// operand pairs in input order (pack_x: hi, and lo for bf16 weights). kNorm: ss accumulates their squares.
template <class C, int PRO, int E>
__device__ __forceinline__ void load_x(const SkinnyGemmParams& p, int64_t row, int j, uint32_t (&xb)[E / 2],
                                       uint32_t (&xl)[E / 2], float& ss) {
  constexpr float kS = C::kScale;
  float v[E];
  if constexpr (PRO == kNorm) {
    float nw[E];
    ld_f32<E>(p.x_f32 + row * p.k + j, v);
    ld_bf16<E>(p.norm_w + j, nw);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      ss = fmaf(v[e], v[e], ss);
      v[e] = v[e] * nw[e] * kS;
    }
  } else if constexpr (PRO == kSwiGlu) {
    const bf16* src = p.x + row * 2 * p.k + j;  // gate | up, each k wide
    float u[E];
    ld_bf16<E>(src, v);
    ld_bf16<E>(src + p.k, u);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = silu_fast(v[e]) * (u[e] * kS);
  } else {
    ld_bf16<E>(p.x + row * p.k + j, v);
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] *= kS;
  }
#pragma unroll
  for (int i = 0; i < E / 2; ++i) pack_x<C>(v[2 * i], v[2 * i + 1], xb[i], xl[i]);
}

// MT: 16-feature tiles per warp, U: steps per stage (2 MT U 16-byte weight loads per lane), KW: warps per group
// sharing k, NB: stages in flight (1: a stage's loads are issued just before its arithmetic; NB > 1: a ring of NB
// register buffers, the one just consumed refilled with the stage NB ahead, so 2 MT U NB loads per lane are in
// flight, and the first NB stages are issued before the PDL wait). A CTA of 8 warps covers 16 MT 8 / KW
// features.
// MX: activation rows computed per lane (1: m = 1; kSkinnyMaxRows: m = 2 .. 8, the rows past m skipped). The
// activations of a step are computed once per row, a unit (C's pair order) per lane: lane 8 t' + q computes unit
// q of chunk 4 s + t', and the quad (g, t) gathers token g's kElems / 2 pairs of chunk 4 s + t by shuffles (at
// m = 1 every quad takes row 0: B columns g > 0 get copies, never stored). Each lane sums the squares of its units
// (kNorm), per row.
// XS: at m = 1 the CTA computes the whole row once after the PDL wait into shared memory in C's pair order (s_x:
// dynamic shared memory of staged_bytes<C>(k)), so the stages read no global activations and wait on no L2 round
// trip of theirs; RMSNorm's sum of squares is then the CTA's (each thread's units, reduced over the CTA), not the
// group's. At m > 1 (same k) the rows are not staged, but their sums of squares come from the same CTA-wide pass,
// so that every row gets the one-row call's bits.
// Grouped C: (k / G) must be a power-of-two number of chunks per group (launch_skinny_gemm checks).
// PERS (the tilings' persistent twins, kernels.h; m = 1): a grid of at most the resident CTAs, CTA b computing
// tiles b, b + gridDim.x, ... (a tile: the kGroups groups a CTA of the plain grid has), each exactly as the plain
// grid's CTA does (the same bits), with the next tile's first stages loaded before this tile's reductions and
// stores, so the weight stream does not stop between tiles; the prologue's CTA-wide pass (XS) runs once per CTA.
template <class C, int MT, int U, int KW, int NB, int MX, bool XS, bool PERS, int PRO, int EPI>
__global__ void __launch_bounds__(kWarpsPerCta * 32) skinny_mma_kernel(SkinnyGemmParams p) {
  constexpr int kGroups = kWarpsPerCta / KW;
  constexpr int kRows = 16 * MT;  // output features per group
  constexpr int kStage = KW * U;  // steps of the group per stage
  constexpr int kBufs = NB;  // stages in flight
  constexpr int kPairs = C::kElems / 2;  // operand pairs per chunk
  constexpr int kWordPairs = C::kElems / 8;  // pairs per 32-bit word of codes
  constexpr int kBlockWords = kWordPairs >= 2 ? 1 : 2;  // words per group of mma (each mma takes two pairs)
  constexpr int kUnits = C::kUnits;  // activation units per chunk
  constexpr int L = kPairs / kUnits;  // activation pairs per unit
  constexpr int kGBufs = C::kGrouped ? kBufs : 1;
  constexpr bool kStaged = XS && MX == 1;  // the row in shared memory
  static_assert(NB >= 1, "at least one stage");
  static_assert(MX == 1 || MX == kSkinnyMaxRows, "one row, or up to kSkinnyMaxRows");
  static_assert(!PERS || MX == 1, "persistent grids at m = 1 only");
  static_assert(kUnits <= 8 && 32 % kUnits == 0 && kPairs % kUnits == 0, "a chunk's units: lanes 8 t' + q, q < 8");
  extern __shared__ uint4 s_xdyn[];  // kStaged: [k / kElems][kElems / 8] uint4 = the row's pairs (bf16: hi, then lo)
  __shared__ float s_red[KW > 1 || XS ? kWarpsPerCta : 1][5][32];  // per warp and lane: one tile's D fragment, ss
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = warp / KW, kw = warp % KW;
  const int tiles = (p.n + kGroups * kRows - 1) / (kGroups * kRows);  // the plain grid's CTAs
  int tile = blockIdx.x;
  int n0 = 0, chunks = 0, steps = 0;  // of the tile in hand (set_tile)
  const char* wbase = C::kBf16 ? static_cast<const char*>(static_cast<const void*>(p.w))
                               : static_cast<const char*>(p.qw.codes);
  const int64_t row_bytes = static_cast<int64_t>(p.k / C::kElems) * 16;

  const uint4* wrow[MT][2];  // feature rows g and g + 8 of each tile (clamped)
  const float* grow[MT][2];  // grouped: their group parameters
  const bool affine = C::kAffine || p.qw.affine;
  int gshift = 0;  // grouped: log2 of the chunks per group
  if constexpr (C::kGrouped) gshift = __ffs(p.qw.group_size / C::kElems) - 1;
  auto set_tile = [&](int tl) {
    n0 = (tl * kGroups + group) * kRows;
    chunks = n0 < p.n ? p.k / C::kElems : 0;  // groups past the end stream nothing (but reach every barrier)
    steps = (chunks + 3) / 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = min(n0 + 16 * mt + 8 * h + g, p.n - 1);
        wrow[mt][h] = reinterpret_cast<const uint4*>(wbase + r * row_bytes);
        if constexpr (C::kGrouped) grow[mt][h] = p.qw.group + r * (p.k / p.qw.group_size) * (affine ? 2 : 1);
      }
  };
  set_tile(tile);
  uint4 wbuf[kBufs][U][MT][2];
  float2 gbuf[kGBufs][U][MT][2];  // grouped: (a, b) of each chunk (b = 0 when not affine)
  auto load_w = [&](auto& wv, auto& gv, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = 4 * (s0 + u * KW) + t;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wv[u][mt][h] = c < chunks ? load_stream(wrow[mt][h] + c) : make_uint4(0, 0, 0, 0);
          if constexpr (C::kGrouped) {
            const int gi = c >> gshift;
            gv[u][mt][h] = c >= chunks ? make_float2(0.f, 0.f)
                           : affine    ? __ldg(reinterpret_cast<const float2*>(grow[mt][h]) + gi)
                                       : make_float2(__ldg(grow[mt][h] + gi), 0.f);
          }
        }
    }
  };
  auto load_first = [&] {
#pragma unroll
    for (int b = 0; b < kBufs; ++b)  // stages past the end: zeros, no loads
      load_w(wbuf[b], gbuf[C::kGrouped ? b : 0], kw + b * kStage);
  };
  pdl_trigger();  // as in the CUDA-core kernel: weights only before the wait
  load_first();
  if (kw == 0) prefetch_rows_l2(p, wbase, n0, kRows, row_bytes, 64u * kStage * kBufs);
  pdl_wait();

  int xrow[MX];  // input row of each activation row (rows past p.m: a copy of the last, never stored)
#pragma unroll
  for (int r = 0; r < MX; ++r) {
    const int i = min(r, p.m - 1);
    xrow[r] = p.x_rows ? p.x_rows[i] : i;
  }
  float acc[MT][4], ss[MX];
#pragma unroll
  for (int r = 0; r < MX; ++r) ss[r] = 0.f;
  if constexpr (kStaged || (XS && PRO == kNorm)) {  // CTA-wide: thread i takes units i, i + 256, ... of each row
    uint32_t* s_x = reinterpret_cast<uint32_t*>(s_xdyn);
#pragma unroll
    for (int r = 0; r < MX; ++r) {
      if (MX > 1 && r >= p.m) break;  // m > 1: only the sums of squares
#pragma unroll 4
      for (int i = threadIdx.x; i < p.k / (2 * L); i += kWarpsPerCta * 32) {
        uint32_t nat[L], nlo[L], mine[L], mlo[L];
        load_x<C, PRO, 2 * L>(p, xrow[r], 2 * L * i, nat, nlo, ss[r]);
        if constexpr (kStaged) {
          C::x_unit(nat, mine);
          C::x_unit(nlo, mlo);
          const int at = kPairs * (i / kUnits) + C::x_pos(i % kUnits);
#pragma unroll
          for (int q = 0; q < L; ++q) {
            s_x[at + q] = mine[q];
            if constexpr (C::kBf16) s_x[p.k / 2 + at + q] = mlo[q];
          }
        }
      }
    }
    if constexpr (PRO == kNorm) {
#pragma unroll
      for (int r = 0; r < MX; ++r) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], o);
        if (lane == 0) s_red[warp][4][r] = ss[r];  // s_red is reused below only after a barrier
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < MX; ++r) {
        ss[r] = 0.f;
        for (int w = 0; w < kWarpsPerCta; ++w) ss[r] += s_red[w][4][r];  // fixed order
      }
    }
    __syncthreads();
  }
  float ss_none = 0.f;  // XS: the sums are complete; the stages' loads add to this instead
  for (;;) {  // the tiles of this CTA: one, or (PERS) tile, tile + gridDim.x, ...
    if constexpr (!XS) {
#pragma unroll
      for (int r = 0; r < MX; ++r) ss[r] = 0.f;  // the stages sum this tile's
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
        if (NB == 1 && s0 != kw) load_w(wbuf[hb], gbuf[C::kGrouped ? hb : 0], s0);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = 4 * (s0 + u * KW) + t;
          if (s0 + u * KW >= steps) break;
          uint32_t xb[kPairs], xl[kPairs];  // the activations of token g at chunk c, in C's pair order (xl: bf16 lo)
#pragma unroll
          for (int i = 0; i < kPairs; ++i) xb[i] = xl[i] = 0;
          if constexpr (kStaged) {  // B columns g > 0 get copies (never stored)
            if (c < chunks) {
#pragma unroll
              for (int v = 0; v < kPairs / 4; ++v) {
                const uint4 q4 = s_xdyn[kPairs / 4 * c + v];
                xb[4 * v] = q4.x, xb[4 * v + 1] = q4.y, xb[4 * v + 2] = q4.z, xb[4 * v + 3] = q4.w;
                if constexpr (C::kBf16) {
                  const uint4 l4 = s_xdyn[p.k / 8 + kPairs / 4 * c + v];
                  xl[4 * v] = l4.x, xl[4 * v + 1] = l4.y, xl[4 * v + 2] = l4.z, xl[4 * v + 3] = l4.w;
                }
              }
            }
          } else {  // lane 8 t' + q: unit q of chunk 4 s + t', for each row
            const int cl = c - t + lane / 8, uq = lane % 8;
            const bool unit = cl < chunks && uq < kUnits;
            uint32_t mine[MX][L], mlo[MX][L];
#pragma unroll
            for (int r = 0; r < MX; ++r) {
#pragma unroll
              for (int q = 0; q < L; ++q) mine[r][q] = mlo[r][q] = 0;
              if (unit && (MX == 1 || r < p.m)) {
                uint32_t nat[L], nlo[L];
                load_x<C, PRO, 2 * L>(p, xrow[r], C::kElems * cl + 2 * L * uq, nat, nlo, XS ? ss_none : ss[r]);
                C::x_unit(nat, mine[r]);
                C::x_unit(nlo, mlo[r]);
              }
            }
#pragma unroll
            for (int i = 0; i < kPairs; ++i) {
              const int src = 8 * t + C::x_unit_of(i);
#pragma unroll
              for (int r = 0; r < MX; ++r) {
                if (MX > 1 && r >= p.m) break;
                const uint32_t h = __shfl_sync(0xffffffffu, mine[r][C::x_reg_of(i)], src);
                uint32_t l = 0;
                if constexpr (C::kBf16) l = __shfl_sync(0xffffffffu, mlo[r][C::x_reg_of(i)], src);
                if (MX == 1 || g == r) xb[i] = h, xl[i] = l;
              }
            }
          }
          float xsum[2] = {0.f, 0.f};  // kStepGroups: the step's sum of the activations of tokens 2t, 2t + 1
          if constexpr (C::kStepGroups) {
            constexpr uint32_t kOne = 0x3C003C00u;  // f16 1.0 pairs: every row of A
            float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int i = 0; i < kPairs; i += 2) mma_f16(d, kOne, kOne, kOne, kOne, xb[i], xb[i + 1]);
            xsum[0] = d[0], xsum[1] = d[1];
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            if constexpr (C::kStepGroups) {  // the codes' dots per step, then the group's a and b (above)
              float lo[4] = {0.f, 0.f, 0.f, 0.f}, hi[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
              for (int w0 = 0; w0 < 4; ++w0) {
                uint32_t a[2][4];
#pragma unroll
                for (int h = 0; h < 2; ++h) C::pairs(reinterpret_cast<const uint32_t*>(&wbuf[hb][u][mt][h])[w0], a[h]);
                mma_f16(lo, a[0][0], a[1][0], a[0][1], a[1][1], xb[4 * w0], xb[4 * w0 + 1]);
                mma_f16(hi, a[0][2], a[1][2], a[0][3], a[1][3], xb[4 * w0 + 2], xb[4 * w0 + 3]);
              }
#pragma unroll
              for (int q = 0; q < 4; ++q) {  // D element q: row g + 8 * (q / 2), token 2t + q % 2
                const float2 gp = gbuf[hb][u][mt][q / 2];
                const float qx = fmaf(hi[q], 0.0625f, lo[q]);  // sum q x times 2^-24
                acc[mt][q] = fmaf(gp.x * 16777216.f, qx, fmaf(gp.y, xsum[q & 1], acc[mt][q]));
              }
              continue;
            }
            uint32_t ga[2] = {0, 0}, gb[2] = {0, 0};  // grouped: (a, a) and (b, b) of rows g, g + 8 as f16x2
            if constexpr (C::kGrouped) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const float2 gp = gbuf[hb][u][mt][h];
                ga[h] = pack_f16x2(gp.x, gp.x);
                gb[h] = pack_f16x2(gp.y, gp.y);
              }
            }
#pragma unroll
            for (int w0 = 0; w0 < 4; w0 += kBlockWords) {  // words w0 .. of the chunk: pairs kWordPairs w0 ..
              constexpr int kBP = kWordPairs * kBlockWords;  // pairs of the block (even)
              uint32_t a[2][kBP];
#pragma unroll
              for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int wb = 0; wb < kBlockWords; ++wb) {
                  uint32_t pr[kWordPairs];
                  C::pairs(reinterpret_cast<const uint32_t*>(&wbuf[hb][u][mt][h])[w0 + wb], pr);
#pragma unroll
                  for (int e = 0; e < kWordPairs; ++e) {
                    if constexpr (C::kGrouped) pr[e] = fma_f16x2(pr[e], ga[h], gb[h]);
                    a[h][kWordPairs * wb + e] = pr[e];
                  }
                }
#pragma unroll
              for (int j = 0; j < kBP / 2; ++j) {
                const int i = kWordPairs * w0 + 2 * j;  // pairs i, i + 1: columns 2t.. and 2t + 8..
                mma_step<C>(acc[mt], a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], xb[i], xb[i + 1],
                            xl[i], xl[i + 1]);
              }
            }
          }
        }
        if (NB > 1 && s0 + NB * kStage < steps) load_w(wbuf[hb], gbuf[C::kGrouped ? hb : 0], s0 + NB * kStage);
      }
    }

    // PERS: the next tile's first stages in flight during this tile's reductions and stores.
    const int tile_n0 = n0;
    int next = tiles;
    if constexpr (PERS) {
      next = tile + static_cast<int>(gridDim.x);
      if (next < tiles) {
        set_tile(next);
        load_first();
      }
    }

    // Row r's sum of squares over this warp's units: the 32 lanes (XS: every thread holds the row's total already);
    // then lane r keeps row r's (m = 1: every lane row 0's).
    float ssl = 0.f;
    if constexpr (PRO == kNorm) {
#pragma unroll
      for (int r = 0; r < MX; ++r) {
        if constexpr (!XS) {
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) ss[r] += __shfl_xor_sync(0xffffffffu, ss[r], o);
        }
        if (MX == 1 || lane == r) ssl = ss[r];
      }
    }
    if constexpr (KW > 1) {  // fixed-order sum over the group's KW warps, one tile at a time
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (mt > 0) __syncthreads();  // the previous tile's reads are done
#pragma unroll
        for (int q = 0; q < 4; ++q) s_red[warp][q][lane] = acc[mt][q];
        if (mt == 0) s_red[warp][4][lane] = XS ? 0.f : ssl;  // XS: kw 0's ss is the total
        __syncthreads();
        if (kw == 0)
          for (int w = 1; w < KW; ++w) {
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[mt][q] += s_red[warp + w][q][lane];
            if (mt == 0) ssl += s_red[warp + w][4][lane];
          }
      }
    }

    if (kw == 0 && tile_n0 < p.n) {  // (KW = 1: kw is 0)
      float out_scale[2];  // tokens 2t, 2t + 1: 1 / C::kScale, times 1 / rms (kNorm)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        out_scale[e] = 1.f / C::kScale;
        if constexpr (PRO == kNorm) {
          const float tss = __shfl_sync(0xffffffffu, ssl, MX == 1 ? 0 : 2 * t + e);  // token 2t + e's: lane 2t + e
          out_scale[e] *= rsqrtf(tss / static_cast<float>(p.k) + p.norm_eps);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int n = tile_n0 + 16 * mt + g + (q >= 2 ? 8 : 0), i = 2 * t + (q & 1);
          if (n >= p.n || i >= p.m) continue;
          float rs = 1.f;  // grouped: none, or with the groups
          if constexpr (!C::kBf16)
            if (p.qw.row_scale) rs = __ldg(p.qw.row_scale + n);
          store_out<EPI>(p, i, n, acc[mt][q] * out_scale[q & 1] * rs);
        }
    }
    if (!PERS || next >= tiles) break;
    tile = next;
    if constexpr (KW > 1) __syncthreads();  // kw 0's reads of s_red are done before the next tile's writes
  }
}

// XS: bytes of the staged row (f16 pairs; bf16: hi and lo pairs), at most kMaxStagedBytes (+ 5 KiB s_red: under
// the 48 KiB default).
constexpr int kMaxStagedBytes = 32768;
template <class C>
constexpr int64_t staged_bytes(int k) {
  return (C::kBf16 ? 4 : 2) * static_cast<int64_t>(k);
}

// One launch of the tiling, grid as wide as the rows need (PERS: at most the CTAs resident at once).
template <class C, int MT, int U, int KW, int NB, int MX, bool XS, bool PERS, int PRO, int EPI>
cudaError_t launch_mma_kernel(const SkinnyGemmParams& p, size_t smem, cudaStream_t stream) {
  const auto kernel = skinny_mma_kernel<C, MT, U, KW, NB, MX, XS, PERS, PRO, EPI>;
  const int rows_per_cta = kWarpsPerCta / KW * 16 * MT;
  int ctas = (p.n + rows_per_cta - 1) / rows_per_cta;
  if constexpr (PERS) {
    if (const cudaError_t e = use_decode_carveout(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
    int resident = 0;
    if (const cudaError_t e = resident_ctas(reinterpret_cast<const void*>(kernel), kWarpsPerCta * 32, smem,
                                            kDecodeCarveoutPercent, &resident);
        e != cudaSuccess)
      return e;
    ctas = std::min(ctas, resident);
  }
  return launch_pdl_decode(kernel, dim3(ctas), dim3(kWarpsPerCta * 32), smem, stream, p);
}

// XS: the m = 1 row staged in shared memory where it fits, and its m > 1 twin (the same sums of squares); else the
// same tiling without. pers (a persistent twin; only the XS tilings have them): at m = 1 the persistent grid of
// the same tiling.
template <class C, int MT, int U, int KW, int NB, bool XS, int PRO, int EPI>
cudaError_t launch_mma(const SkinnyGemmParams& p, bool pers, cudaStream_t stream) {
  constexpr int M8 = kSkinnyMaxRows;
  const bool one = p.m == 1;
  if constexpr (XS) {
    if (staged_bytes<C>(p.k) <= kMaxStagedBytes) {
      const size_t staged = static_cast<size_t>(staged_bytes<C>(p.k));
      if (one && pers) return launch_mma_kernel<C, MT, U, KW, NB, 1, true, true, PRO, EPI>(p, staged, stream);
      if (one) return launch_mma_kernel<C, MT, U, KW, NB, 1, true, false, PRO, EPI>(p, staged, stream);
      if constexpr (PRO == kNorm)  // (other prologues have no sums: their m > 1 twin is the plain kernel below)
        return launch_mma_kernel<C, MT, U, KW, NB, M8, true, false, PRO, EPI>(p, 0, stream);
    }
    if (one && pers) return launch_mma_kernel<C, MT, U, KW, NB, 1, false, true, PRO, EPI>(p, 0, stream);
  }
  if (one) return launch_mma_kernel<C, MT, U, KW, NB, 1, false, false, PRO, EPI>(p, 0, stream);
  return launch_mma_kernel<C, MT, U, KW, NB, M8, false, false, PRO, EPI>(p, 0, stream);
}

// Tilings (MT, U, KW) xNB of variant kQuantSkinnyVariants + i; features per CTA = 128 MT / KW, 16-byte loads per
// lane in flight = 2 MT U NB (NB = 1 when not written); the same for every code type (a step is 64 bytes of a row
// per quad: 128 inputs of 4-bit codes, 64 of 8-bit ones). KW = 8: a CTA is one group of 16 MT features (qkv:
// 384 / MT CTAs, down: 256 / MT); larger MT shares each activation chunk's prologue and conversion over more rows.
//   0 = (1, 4, 8), 1 = (2, 2, 8), 2 = (2, 4, 8), 3 = (1, 8, 8)      one group per CTA
//   4 = (1, 4, 4), 5 = (2, 4, 4), 6 = (4, 2, 8), 7 = (4, 2, 4)      two groups per CTA, or 64 features a group
//   8 = (1, 4, 8)x2, 9 = (2, 2, 8)x2      the next stage's loads in flight during a stage's arithmetic
//   10 = (1, 2, 8)x4, 11 = (1, 1, 8)x8, 12 = (2, 1, 8)x4, 13 = (1, 2, 4)x4, 14 = (1, 4, 4)x3, 15 = (1, 2, 2)x4
//        deeper rings of 16-24 loads per lane (64-96 buffer registers): 12-21 stay in flight during a stage's
//        arithmetic where 8 and 9 keep 8 (long rows: down, k = 14336, is 28 steps a warp at KW = 8), and at
//        k = 4096 (8 steps a warp at KW = 8, 16 at KW = 4) most or all of a warp's loads precede the PDL wait
//   16 = (1, 4, 8)s, 17 = (1, 8, 8)s, 18 = (1, 2, 8)x4s, 19 = (1, 1, 8)x8s      "s": XS where the row fits
//        (k <= 16384; bf16 weights 8192): the stages wait on no activation loads at m = 1; at m > 1 0, 3, 10, 11
//        with the XS sums of squares
// Every format numbers them after its CUDA-core tilings (bf16: kSkinnyVariants, quantized: kQuantSkinnyVariants),
// and the persistent twins of 16-19 after them (kernels.h: kFirstPersistentTwin).
template <class C, int PRO, int EPI>
cudaError_t dispatch_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  const bool pers = p.variant >= kFirstPersistentTwin;  // a persistent twin (launch_mma: persistent at m = 1)
  switch (skinny_twin_tiling(p.variant) - kQuantSkinnyVariants) {
    case 0: return launch_mma<C, 1, 4, 8, 1, false, PRO, EPI>(p, pers, stream);
    case 1: return launch_mma<C, 2, 2, 8, 1, false, PRO, EPI>(p, pers, stream);
    case 2: return launch_mma<C, 2, 4, 8, 1, false, PRO, EPI>(p, pers, stream);
    case 3: return launch_mma<C, 1, 8, 8, 1, false, PRO, EPI>(p, pers, stream);
    case 4: return launch_mma<C, 1, 4, 4, 1, false, PRO, EPI>(p, pers, stream);
    case 5: return launch_mma<C, 2, 4, 4, 1, false, PRO, EPI>(p, pers, stream);
    case 6: return launch_mma<C, 4, 2, 8, 1, false, PRO, EPI>(p, pers, stream);
    case 7: return launch_mma<C, 4, 2, 4, 1, false, PRO, EPI>(p, pers, stream);
    case 8: return launch_mma<C, 1, 4, 8, 2, false, PRO, EPI>(p, pers, stream);
    case 9: return launch_mma<C, 2, 2, 8, 2, false, PRO, EPI>(p, pers, stream);
    case 10: return launch_mma<C, 1, 2, 8, 4, false, PRO, EPI>(p, pers, stream);
    case 11: return launch_mma<C, 1, 1, 8, 8, false, PRO, EPI>(p, pers, stream);
    case 12: return launch_mma<C, 2, 1, 8, 4, false, PRO, EPI>(p, pers, stream);
    case 13: return launch_mma<C, 1, 2, 4, 4, false, PRO, EPI>(p, pers, stream);
    case 14: return launch_mma<C, 1, 4, 4, 3, false, PRO, EPI>(p, pers, stream);
    case 15: return launch_mma<C, 1, 2, 2, 4, false, PRO, EPI>(p, pers, stream);
    case 16: return launch_mma<C, 1, 4, 8, 1, true, PRO, EPI>(p, pers, stream);
    case 17: return launch_mma<C, 1, 8, 8, 1, true, PRO, EPI>(p, pers, stream);
    case 18: return launch_mma<C, 1, 2, 8, 4, true, PRO, EPI>(p, pers, stream);
    default: return launch_mma<C, 1, 1, 8, 8, true, PRO, EPI>(p, pers, stream);
  }
}
static_assert(kMmaVariants == 20, "dispatch_mma lists every tiling");
static_assert(kFirstTwinnedTiling == kQuantSkinnyVariants + 16, "the twins are those of the XS tilings 16-19");

}  // namespace skinny_mma

// The tensor-core skinny GEMM with weight codes C, p validated and p.variant >= kQuantSkinnyVariants (bf16:
// kSkinnyVariants).
template <class C>
cudaError_t launch_skinny_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return skinny_detail::with_pair(p, [&](auto pro, auto epi) {
    return skinny_mma::dispatch_mma<C, decltype(pro)::value, decltype(epi)::value>(p, stream);
  });
}

}  // namespace mopt::cuda
