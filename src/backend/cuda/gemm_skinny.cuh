// The skinny GEMM kernel, templated on the weight format (gemm_skinny.cu validates and launches it).
// Skinny GEMM for decode: y[m, n] = x[m, k] . w[n, k]^T (+ bias) with m <= 8 rows. Decode is bound by reading
// the weights once, so the kernel streams each weight row exactly once with 16-byte loads, several in flight
// per lane, and applies it to all m activation rows (which stay in L1/L2).
//
// Tiling: a CTA of 8 warps is split into 8 / KW row groups of KW warps; a group owns R consecutive output
// features and its KW warps share the k-reduction (lane l of warp w of the group reads the 16-byte chunks
// c = it * 32 * KW * U + u * 32 * KW + w * 32 + l, so each warp reads 512 contiguous bytes per weight row and
// unroll step); lanes finish with shuffles, the KW warps of a group through shared memory (fixed order, so the
// result is deterministic). A lane's U chunks of each of the R rows form a stage; with PIPE two stages are in
// flight and the next stage's loads are issued before the current stage's arithmetic (a row of several stages
// overlaps its dequantization with the stream). The first stage (PIPE: two) is loaded before
// griddepcontrol.wait, and optionally (SkinnyGemmParams::l2_prefetch_bytes) a further part is prefetched into
// L2: weights are never written by a kernel, so with PDL the weight stream starts while the previous kernel
// (attention, RoPE, another GEMM) is still running. The kernel triggers its dependent first thing, so
// consecutive GEMMs (o -> gate|up -> down -> next qkv) overlap their ramps.
//
// Row slices (SkinnyGemmParams::row_slice): the m rows split over blockIdx.y, each CTA computing its slice of
// row_slice rows as an m = row_slice call would. A row's sums do not depend on the rows beside it (each row has its
// own accumulators, shuffles and shared-memory slots), so every slicing gives every row the same bits; the weights
// are then streamed once per slice (the later slices mostly from L2), and a lane's arithmetic per weight is that of
// row_slice rows instead of m: a latency-bound 8-row call (speculative verification) can be faster in slices.
//
// Fused prologues / epilogue (see kernels.h): with kRmsNorm the operand is the fp32 residual times the norm
// weight and each warp accumulates the row's sum of squares from the same loads (every group sees all of k),
// so 1/rms scales the finished dot product: no extra pass over the residual. kSwiGlu computes
// silu(gate) * up from the bf16 gate|up rows while streaming. kAddResidual adds into the fp32 residual.
// Both prologues stay in fp32 (the unfused path rounds the normalized / SwiGLU activations to bf16).
//
// Weight formats: the kernel is templated on a dequantization functor F (quant_formats.cuh). A lane's 16-byte
// load is one chunk of F::kElems inputs (8 bf16, 16 fp8 / int8, 32 4-bit codes): the chunk indexing above
// counts those chunks, the loads stay 16 bytes (full bandwidth at 1 or 0.5 byte per weight), and each chunk is
// applied as kElems / 8 pieces of 8 inputs against the activations. Group parameters are read once per chunk
// and row (L1/L2 hits); a per-row scale (fp8, int8 per channel) multiplies the finished dot product.
#pragma once

#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_formats.cuh"

namespace mopt::cuda {
namespace skinny_detail {

constexpr int kWarpsPerCta = 8;
constexpr int kPlain = static_cast<int>(SkinnyPrologue::kNone);
constexpr int kNorm = static_cast<int>(SkinnyPrologue::kRmsNorm);
constexpr int kSwiGlu = static_cast<int>(SkinnyPrologue::kSwiGlu);
constexpr int kStore = static_cast<int>(SkinnyEpilogue::kStore);
constexpr int kAddRes = static_cast<int>(SkinnyEpilogue::kAddResidual);

// Asynchronous read of [p, p + bytes) into L2 (sm_90 bulk prefetch; p and bytes multiples of 16).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Before the PDL wait: warp kw = 0 of a row group asks L2 for the next part of the codes of rows n0 .. n0 + rows - 1
// (rows past p.n skipped), each row its share of p.l2_prefetch_bytes past the first `loaded` bytes that the
// group's first register loads cover. Lane i sends rows i, i + 32, ...
__device__ __forceinline__ void prefetch_rows_l2(const SkinnyGemmParams& p, const void* codes, int n0, int rows,
                                                 int64_t row_bytes, uint32_t loaded) {
  if (n0 >= p.n) return;
  const int lane = threadIdx.x & 31;
  const char* base = static_cast<const char*>(codes);
  const uint32_t rb = static_cast<uint32_t>(row_bytes);
  const uint32_t start = min(rb, loaded);
  const uint32_t len = min(p.l2_prefetch_bytes / static_cast<uint32_t>(p.n), rb - start) & ~15u;
  for (int r = lane; r < rows && n0 + r < p.n && len > 0; r += 32)
    prefetch_l2(base + static_cast<int64_t>(n0 + r) * row_bytes + start, len);
}

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// silu(g) = g / (1 + e^-g) with the fast exp and divide (two MUFU ops; ~2 ulp; 0 for g -> -inf).
__device__ __forceinline__ float silu_fast(float g) { return __fdividef(g, 1.f + __expf(-g)); }

// The 8 operand values of input row `row` at chunk ch (elements [8 ch, 8 ch + 8)) after the prologue.
// nw: the norm weight of the chunk (kNorm only); ss accumulates the row's sum of squares (kNorm only).
template <int PRO>
__device__ __forceinline__ void load_x(const SkinnyGemmParams& p, int row32, int ch, const float* nw, float* xf,
                                       float& ss) {
  const int64_t row = row32;
  if constexpr (PRO == kNorm) {
    const float4* src = reinterpret_cast<const float4*>(p.x_f32 + row * p.k + ch * 8);
    const float4 a = __ldg(src), b = __ldg(src + 1);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      ss = fmaf(v[e], v[e], ss);
      xf[e] = v[e] * nw[e];
    }
  } else if constexpr (PRO == kSwiGlu) {
    const bf16* src = p.x + row * 2 * p.k + ch * 8;  // gate | up, each k wide
    float g[8], u[8];
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(src)), g);
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(src + p.k)), u);
#pragma unroll
    for (int e = 0; e < 8; ++e) xf[e] = silu_fast(g[e]) * u[e];
  } else {
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.x + row * p.k + ch * 8)), xf);
  }
}

// What the epilogue adds to output (row i, feature n): the fp32 residual's value (kAddRes: y += v; read through
// L2 only, so the residual never sits in a stale L1 line) or the bias (0 without one).
template <int EPI>
__device__ __forceinline__ float epilogue_addend(const SkinnyGemmParams& p, int i, int n) {
  if constexpr (EPI == kAddRes) return __ldcg(static_cast<const float*>(p.y) + static_cast<int64_t>(i) * p.n + n);
  else return p.bias ? __bfloat162float(p.bias[n]) : 0.f;
}

// Output (row i, feature n) from its finished value v and its addend (epilogue_addend): kAddRes stores add + v
// into the fp32 residual, else v + bias is stored (fp32 or bf16).
template <int EPI>
__device__ __forceinline__ void store_sum(const SkinnyGemmParams& p, int i, int n, float v, float add) {
  const int64_t at = static_cast<int64_t>(i) * p.n + n;
  if constexpr (EPI == kAddRes) __stcg(static_cast<float*>(p.y) + at, add + v);
  else if (p.y_f32) static_cast<float*>(p.y)[at] = v + add;
  else static_cast<bf16*>(p.y)[at] = __float2bfloat16(v + add);
}

template <int EPI>
__device__ __forceinline__ void store_out(const SkinnyGemmParams& p, int i, int n, float v) {
  store_sum<EPI>(p, i, n, v, epilogue_addend<EPI>(p, i, n));
}

// bf16 weights are instantiated for every row count 1 .. kSkinnyMaxRows (dispatch_rows: M == a CTA's rows, p.m or
// p.row_slice), quantized ones for 1, 2, 4 and 8 (M >= a CTA's rows, the rows past them skipped at run time).
template <class F>
inline constexpr bool kExactRows = F::kFormat == WeightFormat::kFloat;

// M: activation rows of a CTA (padded up; kExactRows: exactly p.m or p.row_slice), R: output features per row
// group, U: 16-byte loads per lane and weight row per stage, KW: warps per row group sharing the k-reduction, PIPE:
// two stages in flight (the next stage's loads are issued before the current stage's arithmetic). PRO / EPI:
// SkinnyPrologue / SkinnyEpilogue.
template <class F, int M, int R, int U, int KW, bool PIPE, int PRO, int EPI>
__global__ void __launch_bounds__(kWarpsPerCta * 32) skinny_gemm_kernel(SkinnyGemmParams p) {
  constexpr int kGroups = kWarpsPerCta / KW;
  constexpr int kStep = 32 * KW;  // chunks between consecutive unroll steps of one lane
  constexpr int kStage = kStep * U;  // chunks of a row covered by one stage of the row group
  constexpr int kPieces = F::kElems / 8;  // 8-input pieces per 16-byte weight chunk
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][M][R + 1];  // per warp: acc[i][0..R), ss[i] at [R]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / KW, kw = warp % KW;
  // This CTA's output rows [row0, row0 + mrows): all m, or its slice of p.row_slice rows (blockIdx.y).
  const int slice = p.row_slice > 0 ? p.row_slice : p.m;
  const int row0 = static_cast<int>(blockIdx.y) * slice;
  const int mrows = min(slice, p.m - row0);
  const int n0 = (blockIdx.x * kGroups + group) * R;
  const int chunks = n0 < p.n ? p.k / F::kElems : 0;  // groups past the end stream nothing (but reach every barrier)
  const int c_first = kw * 32 + lane;
  const char* wbase = F::kFormat == WeightFormat::kFloat ? static_cast<const char*>(static_cast<const void*>(p.w))
                                                         : static_cast<const char*>(p.qw.codes);
  const int64_t row_bytes = static_cast<int64_t>(p.k / F::kElems) * 16;

  const uint4* wrow[R];
  int64_t wrow_i[R];  // the weight row (clamped) of each of the group's R outputs
#pragma unroll
  for (int r = 0; r < R; ++r) {
    wrow_i[r] = min(n0 + r, p.n - 1);
    wrow[r] = reinterpret_cast<const uint4*>(wbase + wrow_i[r] * row_bytes);
  }
  uint4 wbuf[PIPE ? 2 : 1][U][R];  // stage buffers (PIPE: the current stage and the next)
  auto load_w = [&](auto& wv, int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ch = c0 + u * kStep;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = ch < chunks ? load_stream(wrow[r] + ch) : make_uint4(0, 0, 0, 0);
    }
  };
  // The dependent kernel may launch now: it waits (griddepcontrol.wait) for this grid's completion before it
  // reads anything this grid writes, and meanwhile a dependent GEMM starts its own weight stream below.
  pdl_trigger();
  // Weights only before the wait (no kernel writes them): the first stage (PIPE: two stages) per lane into
  // registers, and the next part of each row of the group (its share of l2_prefetch_bytes) into L2.
  load_w(wbuf[0], c_first);
  if constexpr (PIPE) load_w(wbuf[PIPE ? 1 : 0], c_first + kStage);
  // prefetch_rows_l2's work with one row per lane (R <= 32), kept inline: through the helper, ptxas allocated
  // registers differently in 6 of gemm_skinny_qnib4.cu's 160 kernels (not measured on a GPU).
  if (kw == 0 && lane < R && n0 + lane < p.n) {
    const uint32_t rb = static_cast<uint32_t>(row_bytes);
    const uint32_t start = min(rb, 16u * kStage * (PIPE ? 2 : 1));
    const uint32_t len = min(p.l2_prefetch_bytes / static_cast<uint32_t>(p.n), rb - start) & ~15u;
    if (len > 0) prefetch_l2(wbase + static_cast<int64_t>(n0 + lane) * row_bytes + start, len);
  }
  pdl_wait();

  // Input row of each output row (rows past the CTA's, never read: a copy of its last), loaded without a test
  // between the rows (one round trip for the gathered rows of the LM head).
  int xrow[M];
  if (p.x_rows) {
#pragma unroll
    for (int i = 0; i < M; ++i) xrow[i] = p.x_rows[row0 + min(i, mrows - 1)];
  } else {
#pragma unroll
    for (int i = 0; i < M; ++i) xrow[i] = row0 + min(i, mrows - 1);
  }
  float acc[M][R], ss[M];
#pragma unroll
  for (int i = 0; i < M; ++i) {
    ss[i] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.f;
  }

  // Stage h of an iteration (PIPE: two, buffers wbuf[0] and wbuf[1]; else one) covers chunks cs + u * kStep of
  // each row. With PIPE, while one stage's arithmetic runs the loads of the next are in flight, and the buffer
  // just consumed is refilled with the stage after that. (The body stands inline: as a lambda, ptxas
  // allocated more registers, e.g. 64 -> 73 for bf16 with SwiGLU at one row.)
  constexpr int kBufs = PIPE ? 2 : 1;
  for (int c0 = c_first; c0 < chunks; c0 += kBufs * kStage) {
#pragma unroll
    for (int h = 0; h < kBufs; ++h) {
      const int cs = c0 + h * kStage;
      if (cs >= chunks) break;
      if (!PIPE && cs != c_first) load_w(wbuf[h], cs);
      const uint4 (&wv)[U][R] = wbuf[h];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ch = cs + u * kStep;
        if (ch >= chunks) break;
        typename F::Group g[R];
#pragma unroll
        for (int r = 0; r < R; ++r) g[r] = F::group(p.qw, p.k, wrow_i[r], ch);
#pragma unroll
        for (int j = 0; j < kPieces; ++j) {
          const int xch = ch * kPieces + j;  // 8-input chunk of the activations
          float wf[R][8];
#pragma unroll
          for (int r = 0; r < R; ++r) F::piece(wv[u][r], g[r], j, wf[r]);
          float nw[8];
          if constexpr (PRO == kNorm) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.norm_w + xch * 8)), nw);
#pragma unroll
          for (int i = 0; i < M; ++i) {
            // Exact row counts (bf16): no branch between the rows, so their activation loads issue together
            // instead of one L1/L2 round trip per row.
            if constexpr (!kExactRows<F>) {
              if (i >= mrows) break;
            }
            float xf[8];
            load_x<PRO>(p, xrow[i], xch, nw, xf, ss[i]);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[i][r] = fmaf(xf[e], wf[r][e], acc[i][r]);
          }
        }
      }
      if (PIPE && cs + 2 * kStage < chunks) load_w(wbuf[h], cs + 2 * kStage);
    }
  }

#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int r = 0; r < R; ++r) acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], o);
      if constexpr (PRO == kNorm) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], o);
    }
  }
  if constexpr (KW > 1) {
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
#pragma unroll
        for (int r = 0; r < R; ++r) s_red[warp][i][r] = acc[i][r];
        s_red[warp][i][R] = ss[i];
      }
    }
    __syncthreads();
    if (kw == 0 && lane == 0) {
#pragma unroll
      for (int i = 0; i < M; ++i)
        for (int w = 1; w < KW; ++w) {
#pragma unroll
          for (int r = 0; r < R; ++r) acc[i][r] += s_red[warp + w][i][r];
          ss[i] += s_red[warp + w][i][R];
        }
    }
  }
  if (kw != 0 || lane != 0) return;
  // The epilogue's loads (residual values or bias, per-row weight scales) for all of the thread's M x R outputs
  // before its first store: one memory round trip, not one per output behind the row and feature tests. Rows
  // past the CTA's and features past p.n read a clamped (valid) element and store nothing.
  float add[M][R], rs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int n = min(n0 + r, p.n - 1);
    rs[r] = 1.f;
    if constexpr (F::kFormat != WeightFormat::kFloat)
      if (p.qw.row_scale) rs[r] = __ldg(p.qw.row_scale + n);
#pragma unroll
    for (int i = 0; i < M; ++i) add[i][r] = epilogue_addend<EPI>(p, row0 + min(i, mrows - 1), n);
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (i >= mrows) break;
    float scale = 1.f;
    if constexpr (PRO == kNorm) scale = rsqrtf(ss[i] / static_cast<float>(p.k) + p.norm_eps);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int n = n0 + r;
      if (n >= p.n) break;
      float v = acc[i][r] * scale;
      if constexpr (F::kFormat != WeightFormat::kFloat)
        if (p.qw.row_scale) v *= rs[r];
      store_sum<EPI>(p, row0 + i, n, v, add[i][r]);
    }
  }
}

template <class F, int M, int R, int U, int KW, bool PIPE, int PRO, int EPI>
cudaError_t launch_one(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int rows_per_cta = kWarpsPerCta / KW * R;
  const int slice = p.row_slice > 0 ? p.row_slice : p.m;  // activation rows per CTA
  const dim3 grid((p.n + rows_per_cta - 1) / rows_per_cta, (p.m + slice - 1) / slice);
  return launch_pdl_decode(skinny_gemm_kernel<F, M, R, U, KW, PIPE, PRO, EPI>, grid, dim3(kWarpsPerCta * 32), 0,
                           stream, p);
}

// Variants (rows per group R, unroll U, warps per group KW), bf16 weights, one stage in flight:
//   0 = (2, 4, 1), 1 = (1, 8, 1), 2 = (4, 4, 1), 3 = (1, 4, 1)    one warp per row group
//   4 = (2, 4, 2), 5 = (1, 4, 4), 6 = (2, 4, 8), 7 = (4, 2, 4)    split-k inside the CTA (long k, short n)
//   8 = (4, 4, 4), 9 = (8, 2, 8)    16 loads per lane: k = 4096 rows of a CTA in one round trip (short GEMMs)
// Quantized weights: a chunk holds 16 (fp8, int8) or 32 (4-bit) inputs, so a row has 2-4x fewer chunks than in
// bf16 and its dequantization costs more arithmetic per byte; a stage of kStage = 32 KW U chunks covers a whole
// k = 4096 row of fp8 / int8 at 256 chunks. Variants (R, U, KW), "p": two stages in flight (PIPE):
//   0 = (2, 4, 1), 1 = (1, 4, 4), 2 = (4, 2, 4), 3 = (2, 4, 2)    8 loads per lane and stage (1: 4)
//   4 = (8, 2, 4), 5 = (4, 4, 2)    16 loads per lane: a 256-chunk row in one round trip (qkv, o, gate|up);
//       4-bit codes (128 chunks per k = 4096 row): 4 = (8, 2, 2), 5 = (4, 4, 1)
//   6 = (2, 4, 1)p, 7 = (4, 2, 2)p, 8 = (8, 1, 4)p, 9 = (4, 1, 8)p    the arithmetic of one stage overlaps
//   the loads of the next: long rows (down, k = 14336: 896 chunks) and rows of several stages
// With 8 activation rows, variants 4 and 8 take R = 4 (R = 8 needs 238-255 registers, and spills with PIPE).
// Larger R amortizes the per-input prologue work over more rows: the RMSNorm product and sum of squares, and
// SwiGLU's two MUFU operations per input (a quarter of the FMA rate), which at R = 2 cost about as many issue
// cycles per fp8 chunk as the chunk's share of the memory time.
// kQuantSkinnyVariants (kernels.h) = 10; every format adds kMmaVariants tensor-core tilings after its CUDA-core
// ones (gemm_skinny_mma.cuh), then persistent twins of the last four (kernels.h), timed by the tuner beside these.
inline constexpr int kMmaVariants = kMmaSkinnyVariants;
// KW of each variant in the tables below (skinny_reduction_order): bf16, quantized, and 4-bit codes.
inline constexpr int kSplitWarpsBf16[kSkinnyVariants] = {1, 1, 1, 1, 2, 4, 8, 4, 4, 8};
inline constexpr int kSplitWarpsQuant[kQuantSkinnyVariants] = {1, 4, 4, 2, 4, 2, 1, 2, 4, 8};
inline constexpr int kSplitWarpsNib[kQuantSkinnyVariants] = {1, 4, 4, 2, 2, 1, 1, 2, 4, 8};
template <class F, int M, int PRO, int EPI>
cudaError_t dispatch_variant(const SkinnyGemmParams& p, cudaStream_t stream) {
  if constexpr (F::kFormat == WeightFormat::kFloat) {
    switch (p.variant) {
      case 0: return launch_one<F, M, 2, 4, 1, false, PRO, EPI>(p, stream);
      case 1: return launch_one<F, M, 1, 8, 1, false, PRO, EPI>(p, stream);
      case 2: return launch_one<F, M, 4, 4, 1, false, PRO, EPI>(p, stream);
      case 3: return launch_one<F, M, 1, 4, 1, false, PRO, EPI>(p, stream);
      case 4: return launch_one<F, M, 2, 4, 2, false, PRO, EPI>(p, stream);
      case 5: return launch_one<F, M, 1, 4, 4, false, PRO, EPI>(p, stream);
      case 6: return launch_one<F, M, 2, 4, 8, false, PRO, EPI>(p, stream);
      case 7: return launch_one<F, M, 4, 2, 4, false, PRO, EPI>(p, stream);
      case 8: return launch_one<F, M, 4, 4, 4, false, PRO, EPI>(p, stream);
      default: return launch_one<F, M, 8, 2, 8, false, PRO, EPI>(p, stream);
    }
  } else {
    constexpr bool kNib = F::kElems == 32;  // 4-bit: 128 chunks per k = 4096 row
    constexpr int kR8 = M >= 8 ? 4 : 8;      // 8 rows x R = 8 accumulators x 2 stages would spill
    switch (p.variant) {
      case 0: return launch_one<F, M, 2, 4, 1, false, PRO, EPI>(p, stream);
      case 1: return launch_one<F, M, 1, 4, 4, false, PRO, EPI>(p, stream);
      case 2: return launch_one<F, M, 4, 2, 4, false, PRO, EPI>(p, stream);
      case 3: return launch_one<F, M, 2, 4, 2, false, PRO, EPI>(p, stream);
      case 4:
        if constexpr (kNib) return launch_one<F, M, kR8, 2, 2, false, PRO, EPI>(p, stream);
        else return launch_one<F, M, kR8, 2, 4, false, PRO, EPI>(p, stream);
      case 5:
        if constexpr (kNib) return launch_one<F, M, 4, 4, 1, false, PRO, EPI>(p, stream);
        else return launch_one<F, M, 4, 4, 2, false, PRO, EPI>(p, stream);
      case 6: return launch_one<F, M, 2, 4, 1, true, PRO, EPI>(p, stream);
      case 7: return launch_one<F, M, 4, 2, 2, true, PRO, EPI>(p, stream);
      case 8: return launch_one<F, M, kR8, 1, 4, true, PRO, EPI>(p, stream);
      default: return launch_one<F, M, 4, 1, 8, true, PRO, EPI>(p, stream);
    }
  }
}

// The instantiation for the rows of one CTA: p.m, or p.row_slice when the rows are sliced over blockIdx.y.
template <class F, int PRO, int EPI>
cudaError_t dispatch_rows(const SkinnyGemmParams& p, cudaStream_t stream) {
  static_assert(kSkinnyMaxRows == 8, "dispatch_rows instantiates row counts up to 8");
  const int rows = p.row_slice > 0 ? p.row_slice : p.m;
  if (rows == 1) return dispatch_variant<F, 1, PRO, EPI>(p, stream);
  if (rows == 2) return dispatch_variant<F, 2, PRO, EPI>(p, stream);
  if constexpr (kExactRows<F>) {
    switch (rows) {
      case 3: return dispatch_variant<F, 3, PRO, EPI>(p, stream);
      case 4: return dispatch_variant<F, 4, PRO, EPI>(p, stream);
      case 5: return dispatch_variant<F, 5, PRO, EPI>(p, stream);
      case 6: return dispatch_variant<F, 6, PRO, EPI>(p, stream);
      case 7: return dispatch_variant<F, 7, PRO, EPI>(p, stream);
      default: return dispatch_variant<F, 8, PRO, EPI>(p, stream);
    }
  } else {
    if (rows <= 4) return dispatch_variant<F, 4, PRO, EPI>(p, stream);
    return dispatch_variant<F, 8, PRO, EPI>(p, stream);
  }
}

// f(PRO, EPI) with p's prologue / epilogue pair as std::integral_constant<int> values; cudaErrorInvalidValue for a
// pair that is not instantiated (see kernels.h).
template <class Fn>
cudaError_t with_pair(const SkinnyGemmParams& p, Fn&& f) {
  using Pro = std::integral_constant<int, kPlain>;
  using Norm = std::integral_constant<int, kNorm>;
  using Glu = std::integral_constant<int, kSwiGlu>;
  using Store = std::integral_constant<int, kStore>;
  using AddRes = std::integral_constant<int, kAddRes>;
  const SkinnyPrologue pro = p.prologue;
  const SkinnyEpilogue epi = p.epilogue;
  if (pro == SkinnyPrologue::kNone && epi == SkinnyEpilogue::kStore) return f(Pro{}, Store{});
  if (pro == SkinnyPrologue::kNone && epi == SkinnyEpilogue::kAddResidual) return f(Pro{}, AddRes{});
  if (pro == SkinnyPrologue::kRmsNorm && epi == SkinnyEpilogue::kStore) return f(Norm{}, Store{});
  if (pro == SkinnyPrologue::kSwiGlu && epi == SkinnyEpilogue::kAddResidual) return f(Glu{}, AddRes{});
  return cudaErrorInvalidValue;
}

}  // namespace skinny_detail

// The skinny GEMM for weight format F, p already validated by launch_skinny_gemm (gemm_skinny.cu). Instantiated
// once per format, each in its own translation unit (gemm_skinny.cu, gemm_skinny_quant_*.cu) so they compile in
// parallel.
template <class F>
cudaError_t launch_skinny_fmt(const SkinnyGemmParams& p, cudaStream_t stream) {
  return skinny_detail::with_pair(p, [&](auto pro, auto epi) {
    return skinny_detail::dispatch_rows<F, decltype(pro)::value, decltype(epi)::value>(p, stream);
  });
}

// The tensor-core tilings (gemm_skinny_mma.cuh) for bf16, fp8, per-channel int8, grouped int8 and 4-bit weights, p
// validated, p.variant >= kQuantSkinnyVariants (grouped: a power-of-two number of chunks per group).
cudaError_t launch_skinny_bf16_mma(const SkinnyGemmParams& p, cudaStream_t stream);
cudaError_t launch_skinny_fp8_mma(const SkinnyGemmParams& p, cudaStream_t stream);
cudaError_t launch_skinny_int8_mma(const SkinnyGemmParams& p, cudaStream_t stream);
cudaError_t launch_skinny_int8g_mma(const SkinnyGemmParams& p, cudaStream_t stream);
cudaError_t launch_skinny_nib4_mma(const SkinnyGemmParams& p, cudaStream_t stream);

extern template cudaError_t launch_skinny_fmt<FmtBf16>(const SkinnyGemmParams&, cudaStream_t);
extern template cudaError_t launch_skinny_fmt<FmtFp8>(const SkinnyGemmParams&, cudaStream_t);
extern template cudaError_t launch_skinny_fmt<FmtInt8>(const SkinnyGemmParams&, cudaStream_t);
extern template cudaError_t launch_skinny_fmt<FmtNib4>(const SkinnyGemmParams&, cudaStream_t);

}  // namespace mopt::cuda
