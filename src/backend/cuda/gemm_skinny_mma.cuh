// The skinny GEMM on the f16 tensor cores for quantized weights (launch_skinny_gemm's variants kQuantSkinnyVariants
// and up of kFp8, kInt8 (per channel or grouped) and kNib4; gemm_skinny.cu validates and dispatches; one translation
// unit per code type: gemm_skinny_mma_{fp8,int8,int8g,nib4}.cu). Same contract as the CUDA-core kernel of
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

// Weight codes -> the A fragment. A code type C describes a 16-byte chunk:
//   kElems     inputs per chunk (16: a byte each; 32: 4-bit codes); kElems / 2 pairs, kElems / 8 per 32-bit word
//   kGrouped   pairs() gives the exact codes q and the group's (a, b) is applied to them (see above); kAffine:
//              the groups always hold (a, b) (else QuantWeightView::affine decides)
//   pairs(word, out)   word w's codes as f16x2 pairs kElems / 8 w .. (the pair order above), exactly
// and, through its pair order (BytePairs / NibblePairs), where the activations go: the kElems / 2 natural pairs
// (inputs 2 i, 2 i + 1) of a chunk form 8 "units" of L = kElems / 16 pairs; x_unit(nat, out) reorders unit q's
// pairs into the chunk's pairs x_pos(q) .. + L - 1, and pair i comes from unit x_unit_of(i), slot x_reg_of(i).
struct BytePairs {  // pair i = inputs (2 i, 2 i + 1): the natural order
  static constexpr int kElems = 16;
  __host__ __device__ static constexpr int x_pos(int q) { return q; }
  __host__ __device__ static constexpr int x_unit_of(int i) { return i; }
  __host__ __device__ static constexpr int x_reg_of(int) { return 0; }
  __device__ static void x_unit(const uint32_t (&nat)[1], uint32_t (&out)[1]) { out[0] = nat[0]; }
};
struct NibblePairs {  // unit q = inputs 4 q .. 4 q + 3 -> (4q, 4q+2), (4q+1, 4q+3) at pairs 4 q (q < 4), 4 (q-4) + 2
  static constexpr int kElems = 32;
  __host__ __device__ static constexpr int x_pos(int q) { return q < 4 ? 4 * q : 4 * (q - 4) + 2; }
  __host__ __device__ static constexpr int x_unit_of(int i) { return (i & 2) ? 4 + i / 4 : i / 4; }
  __host__ __device__ static constexpr int x_reg_of(int i) { return i & 1; }
  __device__ static void x_unit(const uint32_t (&nat)[2], uint32_t (&out)[2]) {
    out[0] = __byte_perm(nat[0], nat[1], 0x5410);  // low halves: inputs 4q, 4q + 2
    out[1] = __byte_perm(nat[0], nat[1], 0x7632);  // high halves: 4q + 1, 4q + 3
  }
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
// features. X1 (m = 1): the activations of a step are computed once, a unit (C's pair order) per lane, and quad 0
// gathers its kElems / 2 pairs by shuffles (without X1 every lane computes the kElems of its token, 8x the
// prologue work at m = 1: SwiGLU's exp and divide, RMSNorm's loads). XS (with X1): instead the CTA computes the
// whole row once after the PDL wait into shared memory as f16 in C's pair order (s_x, k / 2 words: dynamic shared
// memory of 2 k bytes), so the stages read no global activations and wait on no L2 round trip of theirs;
// RMSNorm's sum of squares is then the CTA's (each thread's units, reduced over the CTA), not the group's.
// Grouped C: (k / G) must be a power-of-two number of chunks per group (launch_skinny_gemm checks).
template <class C, int MT, int U, int KW, int NB, bool X1, bool XS, int PRO, int EPI>
__global__ void __launch_bounds__(kWarpsPerCta * 32) skinny_mma_kernel(SkinnyGemmParams p) {
  constexpr int kGroups = kWarpsPerCta / KW;
  constexpr int kRows = 16 * MT;  // output features per group
  constexpr int kStage = KW * U;  // steps of the group per stage
  constexpr int kBufs = NB;  // stages in flight
  constexpr int kPairs = C::kElems / 2;  // f16x2 pairs per chunk
  constexpr int kWordPairs = C::kElems / 8;  // pairs per 32-bit word of codes
  constexpr int L = C::kElems / 16;  // activation pairs per unit (8 units a chunk)
  constexpr int kGBufs = C::kGrouped ? kBufs : 1;
  static_assert(NB >= 1, "at least one stage");
  static_assert(X1 || !XS, "staged activations: m = 1 only");
  extern __shared__ uint4 s_xdyn[];  // XS: [k / kElems][kElems / 8] uint4 = the row's f16 pairs in C's order
  __shared__ float s_red[KW > 1 || XS ? kWarpsPerCta : 1][5][32];  // per warp and lane: one tile's D fragment, ss
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = warp / KW, kw = warp % KW;
  const int n0 = (blockIdx.x * kGroups + group) * kRows;
  const int chunks = n0 < p.n ? p.k / C::kElems : 0;  // groups past the end stream nothing (but reach every barrier)
  const int steps = (chunks + 3) / 4;
  const char* wbase = static_cast<const char*>(p.qw.codes);
  const int64_t row_bytes = static_cast<int64_t>(p.k / C::kElems) * 16;

  const uint4* wrow[MT][2];  // feature rows g and g + 8 of each tile (clamped)
  const float* grow[MT][2];  // grouped: their group parameters
  const bool affine = C::kAffine || p.qw.affine;
  int gshift = 0;  // grouped: log2 of the chunks per group
  if constexpr (C::kGrouped) gshift = __ffs(p.qw.group_size / C::kElems) - 1;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = min(n0 + 16 * mt + 8 * h + g, p.n - 1);
      wrow[mt][h] = reinterpret_cast<const uint4*>(wbase + r * row_bytes);
      if constexpr (C::kGrouped) grow[mt][h] = p.qw.group + r * (p.k / p.qw.group_size) * (affine ? 2 : 1);
    }
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
  pdl_trigger();  // as in the CUDA-core kernel: weights only before the wait
#pragma unroll
  for (int b = 0; b < kBufs; ++b)  // stages past the end: zeros, no loads
    load_w(wbuf[b], gbuf[C::kGrouped ? b : 0], kw + b * kStage);
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
  if constexpr (XS) {  // the row once per CTA: thread i takes units i, i + 256, ...; ss: the CTA's total
    uint32_t* s_x = reinterpret_cast<uint32_t*>(s_xdyn);
#pragma unroll 4
    for (int i = threadIdx.x; i < p.k / (2 * L); i += kWarpsPerCta * 32) {
      uint32_t nat[L], mine[L];
      load_x<PRO, 2 * L>(p, xrow, 2 * L * i, nat, ss);
      C::x_unit(nat, mine);
#pragma unroll
      for (int r = 0; r < L; ++r) s_x[kPairs * (i / 8) + C::x_pos(i % 8) + r] = mine[r];
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
      if (NB == 1 && s0 != kw) load_w(wbuf[hb], gbuf[C::kGrouped ? hb : 0], s0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = 4 * (s0 + u * KW) + t;
        if (s0 + u * KW >= steps) break;
        uint32_t xb[kPairs];  // the activations of token g at chunk c, in C's pair order
#pragma unroll
        for (int i = 0; i < kPairs; ++i) xb[i] = 0;
        if constexpr (XS) {  // B columns g > 0 get copies (never stored)
          if (c < chunks) {
#pragma unroll
            for (int v = 0; v < kPairs / 4; ++v) {
              const uint4 q4 = s_xdyn[kPairs / 4 * c + v];
              xb[4 * v] = q4.x, xb[4 * v + 1] = q4.y, xb[4 * v + 2] = q4.z, xb[4 * v + 3] = q4.w;
            }
          }
        } else if constexpr (X1) {  // lane 8 t' + q: unit q of chunk 4 s + t'; B columns g > 0 get copies
          const int cl = c - t + lane / 8;
          uint32_t mine[L];
#pragma unroll
          for (int r = 0; r < L; ++r) mine[r] = 0;
          if (cl < chunks) {
            uint32_t nat[L];
            load_x<PRO, 2 * L>(p, xrow, C::kElems * cl + 2 * L * (lane % 8), nat, ss);
            C::x_unit(nat, mine);
          }
#pragma unroll
          for (int i = 0; i < kPairs; ++i)
            xb[i] = __shfl_sync(0xffffffffu, mine[C::x_reg_of(i)], 8 * t + C::x_unit_of(i));
        } else if (has_x && c < chunks) {
          uint32_t nat[kPairs];
          load_x<PRO, C::kElems>(p, xrow, C::kElems * c, nat, ss);
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            uint32_t in[L], out[L];
#pragma unroll
            for (int r = 0; r < L; ++r) in[r] = nat[L * q + r];
            C::x_unit(in, out);
#pragma unroll
            for (int r = 0; r < L; ++r) xb[C::x_pos(q) + r] = out[r];
          }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
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
          for (int w = 0; w < 4; ++w) {  // word w of the chunk: pairs kWordPairs w .. of rows g, g + 8
            uint32_t a[2][kWordPairs];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              C::pairs(reinterpret_cast<const uint32_t*>(&wbuf[hb][u][mt][h])[w], a[h]);
              if constexpr (C::kGrouped) {
#pragma unroll
                for (int e = 0; e < kWordPairs; ++e) a[h][e] = fma_f16x2(a[h][e], ga[h], gb[h]);
              }
            }
#pragma unroll
            for (int j = 0; j < kWordPairs / 2; ++j) {
              const int i = kWordPairs * w + 2 * j;  // pairs i, i + 1: columns 2t.. and 2t + 8..
              mma_f16(acc[mt], a[0][2 * j], a[1][2 * j], a[0][2 * j + 1], a[1][2 * j + 1], xb[i], xb[i + 1]);
            }
          }
        }
      }
      if (NB > 1 && s0 + NB * kStage < steps) load_w(wbuf[hb], gbuf[C::kGrouped ? hb : 0], s0 + NB * kStage);
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
      const float rs = p.qw.row_scale ? __ldg(p.qw.row_scale + n) : 1.f;  // grouped: none, or with the groups
      store_out<EPI>(p, i, n, acc[mt][q] * out_scale[q & 1] * rs);
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
