// Skinny GEMM with 8-bit activations on the integer tensor cores, for Q8_0-style grouped int8 weights (a first
// kernel, timed by bench_gpu_skinny --w8a8 beside the f16 tensor-core tilings; not yet a runner variant).
//
// y[m, n] = x[m, k] . w[n, k]^T for m <= 8 activation rows, w in kInt8 with groups of 32 inputs and no offset
// (Q8_0 and symmetric int8 groups: w = a q). Each activation row (after the prologue, as the other skinny kernels
// compute it) is quantized per group of 32 inputs as the CPU backend's Q8_0 activations are (d = max |x| / 127,
// q = round(x / d), d kept in fp16; llama.cpp's scheme), then every group is one mma.sync.m16n8k32 s8 x s8 -> s32
// (exact), scaled in fp32 by a_w d_x: no per-weight conversion at all, where the f16 kernels spend three
// operations per pair of weights (a byte permute, a subtraction and the group's multiply). One row is quantized
// once per CTA into shared memory (k <= 16384); several rows (or a longer one) are quantized step by step by the
// lanes that hold them; either way a row's result has the bits of a one-row call.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace mopt::cuda {

// Tilings of launch_skinny_w8a8 (MT 16-row tiles per warp, U steps of 64 bytes a row per stage, KW warps splitting
// k, NB stages in flight); the last two are tilings 0 and 4 as persistent grids.
inline constexpr int kW8a8Tilings = 8;

// p: m = 1 .. 8, qw.fmt kInt8 with group_size 32 and no offset or row scale, k a multiple of 64, no row slices,
// any prologue and epilogue of the skinny GEMM (kernels.h); p.variant is ignored. cudaErrorNotSupported otherwise;
// cudaErrorInvalidValue for missing or misaligned operands (as launch_skinny_gemm).
cudaError_t launch_skinny_w8a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream);

}  // namespace mopt::cuda
