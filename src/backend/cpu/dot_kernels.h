// Row dot-product kernels behind matmul: one weight row against R (1..kDotRows) activation rows.
// Activations are pre-converted: Q8_0 blocks for Q8_0/Q4_0 weights, Q8_K blocks for K-quants, fp32 otherwise.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mopt::cpu {

inline constexpr int kDotRows = 4;

// out[r * out_stride] = dot(w_row, act + r * act_stride) for r < R.
//   w_row: K elements of the weight dtype; act: R rows of K elements in the activation format,
//   act_stride bytes apart.
using DotFn = void (*)(const void* w_row, const void* act, uint64_t act_stride, int64_t K, float* out,
                       int64_t out_stride);

// kDotRows kernels for weight dtype t (entry R-1 handles R rows); nullptr for unsupported dtypes.
const DotFn* dot_kernels(DType t);
// The portable scalar kernels (same contract), for tests comparing against the SIMD path.
const DotFn* dot_kernels_scalar(DType t);

}  // namespace mopt::cpu
