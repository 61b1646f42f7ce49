// Row dot-product kernels behind matmul: one weight row against R (1..kDotRows) activation rows.
// Activations are pre-converted: Q8_0 blocks for Q8_0/Q4_0 weights, Q8_K blocks for K-quants, fp32 otherwise.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mopt::cpu {

inline constexpr int kDotRows = 4;

// R consecutive activation rows in the activation format.
struct ActRows {
  const void* data;   // row 0; rows are `stride` bytes apart
  uint64_t stride;
  const float* d;     // Q8_0 activations only: [R, d_stride] block scales as fp32 (== fp16_to_fp32(block.d)),
  int64_t d_stride;   // precomputed once per matmul so the kernels do no fp16 conversions per (row, block)
};

// out[r * out_stride] = dot(w_row, activation row r) for r < R. w_row: K elements of the weight dtype.
using DotFn = void (*)(const void* w_row, const ActRows& act, int64_t K, float* out, int64_t out_stride);

// kDotRows kernels for weight dtype t (entry R-1 handles R rows); nullptr for unsupported dtypes.
const DotFn* dot_kernels(DType t);
// The portable scalar kernels (same contract), for tests comparing against the SIMD path.
const DotFn* dot_kernels_scalar(DType t);

// Kernels of one instruction set, nullptr where this build or CPU lacks it (tests run every variant).
// kAvxVnni covers Q8_0/Q4_0 only (vpdpbusd replaces maddubs + madd); dot_kernels() picks it when the CPU
// has AVX-VNNI, checked at run time (the build flags stay AVX2).
enum class DotIsa { kScalar, kAvx2, kAvxVnni };
const DotFn* dot_kernels_isa(DType t, DotIsa isa);
bool cpu_has_avx_vnni();
const DotFn* dot_kernels_vnni(DType t);  // AVX-VNNI Q8_0/Q4_0 kernels (call only if cpu_has_avx_vnni())

}  // namespace mopt::cpu
