// Skinny GEMM with 8-bit activations on the integer tensor cores ("a8"), for grouped int8 and 4-bit weights: skinny
// variants kFirstA8Variant and up of kInt8 and kNib4 (kernels.h), which the decode GEMMs' tuner times beside the
// others (Gemm::int8_activations; bench_gpu_skinny --a8 times each tiling beside the f16 tensor-core ones).
//
// y[m, n] = x[m, k] . w[n, k]^T for m <= 8 activation rows, w with groups: int8 codes of groups of 32 without
// offset (Q8_0, Q5_0: w = a q) or 4-bit codes with (a, b) groups of 32 or more inputs (Q4_0, Q4_K, AWQ: w = a q + b).
// Each activation row (after the prologue, as the other skinny kernels compute it) is quantized per group of 32
// inputs as the CPU backend's Q8_0 activations are (d = max |x| / 127, q = round(x / d), d kept in fp16;
// llama.cpp's scheme), then every group is one mma.sync.m16n8k32 s8 x s8 -> s32 (exact; 4-bit codes masked into
// bytes, two ands and a shift for eight), scaled in fp32: a d_x sum(q_w q_x) (+ b d_x sum(q_x)). No per-weight
// conversion to f16, where the f16 kernels spend three operations per pair of weights (int8: a byte permute, a
// subtraction and the group's multiply). One row is quantized once per CTA into shared memory (k <= 16384);
// several rows (or a longer one) are quantized step by step by the lanes that hold them; either way a row's result
// has the bits of a one-row call.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace mopt::cuda {

// Tilings of launch_skinny_a8: MT 16-row tiles per warp, U steps of 64 inputs a row per stage (wide: U pairs of
// the warp's steps), KW warps splitting k, NB stages in flight, persistent: a grid of at most the CTAs resident at
// once, each taking several tiles (the same bits as the plain grid). The order of each output's sums depends on KW
// alone (warp kw sums steps kw, kw + KW, ... in ascending order, the warps in warp order), so tilings of equal KW
// give equal bits.
// wide: one row of 4-bit codes (gemm_skinny_a8_wide.cu): each lane loads a whole group (16 bytes) of a row where the
// others load 4, and the mma's B columns take groups instead of rows; one activation row only (m = 1, k <= 16384,
// kNib4), refused otherwise (cudaErrorNotSupported). The rows of a verification step run a plain tiling of the same
// KW (the same bits).
struct A8Tiling {
  int mt, u, kw, nb;
  bool persistent;
  bool wide = false;
};
inline constexpr A8Tiling kA8TilingTable[] = {
    {1, 2, 8, 2, false}, {1, 4, 8, 2, false}, {2, 2, 8, 2, false}, {1, 2, 4, 2, false},
    {1, 1, 8, 4, false}, {2, 2, 4, 2, false}, {1, 2, 8, 2, true},  {1, 1, 8, 4, true},  // 6, 7: 0 and 4, persistent
    // 8 .. 15: wide, one row of 4-bit codes (13, 14: 9 and 8 as persistent grids)
    {1, 1, 8, 2, false, true}, {1, 1, 8, 4, false, true}, {1, 2, 8, 2, false, true}, {2, 1, 8, 2, false, true},
    {1, 1, 4, 4, false, true}, {1, 1, 8, 4, true, true},  {1, 1, 8, 2, true, true},  {2, 1, 8, 1, false, true},
};
inline constexpr int kA8Tilings = sizeof(kA8TilingTable) / sizeof(kA8TilingTable[0]);
inline constexpr int kFirstWideA8Tiling = 8;
constexpr bool a8_tilings_ordered() {  // the plain tilings first, then the wide ones
  for (int i = 0; i < kA8Tilings; ++i)
    if (kA8TilingTable[i].wide != (i >= kFirstWideA8Tiling)) return false;
  return true;
}
static_assert(a8_tilings_ordered());
static_assert(kA8Tilings == kA8SkinnyVariants, "kernels.h numbers the a8 variants");

// The weights the kernel multiplies: kInt8 with groups of 32 and no offset or row scale (Q8_0, Q5_0), or kNib4
// with groups of 32 times a power of two (Q4_0 and Q4_K: 32; AWQ: 128).
inline bool a8_supports(const QuantWeightView& qw) {
  if (!qw.group || qw.row_scale) return false;
  if (qw.fmt == WeightFormat::kInt8) return qw.group_size == 32 && !qw.affine;
  const int per = qw.group_size / 32;
  return qw.fmt == WeightFormat::kNib4 && qw.affine && qw.group_size % 32 == 0 && per > 0 && (per & (per - 1)) == 0;
}

// Whether tiling `tiling` runs p (kA8TilingTable: the wide ones take one row of 4-bit codes with k <= 16384).
bool a8_tiling_runs(const SkinnyGemmParams& p, int tiling);

// p: m = 1 .. 8, a8_supports(p.qw), k a multiple of 64 and of the group size, no row slices, any prologue and
// epilogue of the skinny GEMM (kernels.h), l2_prefetch_bytes as there, and what a wide tiling needs
// (a8_tiling_runs); p.variant is ignored. cudaErrorNotSupported otherwise; cudaErrorInvalidValue for missing or
// misaligned operands (as launch_skinny_gemm).
cudaError_t launch_skinny_a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream);

// The wide tilings (gemm_skinny_a8_wide.cu), after launch_skinny_a8's checks: wide_index 0 .. for tilings 8 ..
cudaError_t launch_skinny_a8_wide(const SkinnyGemmParams& p, int wide_index, cudaStream_t stream);

}  // namespace mopt::cuda
