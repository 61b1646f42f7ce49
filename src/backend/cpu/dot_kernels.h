// Row dot-product kernels behind matmul: one weight row against R (1..kDotRows) activation rows.
// Activations are pre-converted to the weight type's vec_dot_type (core/dtype.h): Q8_0 blocks for Q8_0/Q4_0
// weights, Q8_K blocks for K-quants, fp32 otherwise. Which kernels a type has, per instruction set, is its row
// of the CPU format table (formats.h).
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"
#include "core/dtype.h"

namespace mopt::cpu {

inline constexpr int kDotRows = 4;

// R consecutive activation rows in the activation format.
struct ActRows {
  const void* data;   // row 0; rows are `stride` bytes apart
  uint64_t stride;
  const float* d;     // activation types with per-block scales to precompute (Q8_0): [R, d_stride] block scales
  int64_t d_stride;   // as fp32, computed once per matmul so the kernels do no fp16 conversions per (row, block)
  const float* s;     // and [R, d_stride] the sums of each block's codes (exact in fp32), beside d
};

// out[r * out_stride] = dot(w_row, activation row r) for r < R. w_row: K elements of the weight dtype.
using DotFn = void (*)(const void* w_row, const ActRows& act, int64_t K, float* out, int64_t out_stride);

// One weight type's kernels of one instruction set: rows[R-1] handles R activation rows.
struct DotSet {
  DotFn rows[kDotRows];
};

// Row kernels exist per instruction set (isa.h) where a set helps: kAvxVnni covers Q8_0/Q4_0/Q5_0 only (vpdpbusd
// replaces maddubs + madd), compiled for that target inside an AVX2 build and chosen at run time.

// The best kernels for weight dtype t on the active path (isa_active(): the best of this CPU unless lowered), entry
// R-1 handling R rows; nullptr for unsupported dtypes.
const DotFn* dot_kernels(DType t);
// Kernels of one instruction set, nullptr where this build, this CPU or t lacks them (tests run every variant).
const DotFn* dot_kernels_isa(DType t, DotIsa isa);

// The kernel sets each instruction set's file defines (formats.cpp puts them in the rows of the CPU table).
namespace dot_scalar {  // dot_scalar.cpp: plain C++, every build
extern const DotSet f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q5_0, q5_1, fp8, int8, int4_g128;
}
#ifdef __AVX2__
namespace dot_avx2 {  // dot_avx2.cpp (GGUF types, floats) and dot_avx2_rows.cpp (FP8, INT8, INT4_G128): AVX2 + FMA +
                      // F16C builds
extern const DotSet f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q5_0, q5_1, fp8, int8, int4_g128;
}
namespace dot_vnni {  // dot_vnni.cpp: AVX-VNNI, inside AVX2 builds
extern const DotSet q8_0, q4_0, q5_0;
}
#endif

}  // namespace mopt::cpu
