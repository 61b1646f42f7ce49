// The CPU backend's table of kernels per element type: one row per DType (formats.cpp), next to the
// backend-neutral facts of core's dtype table (core/dtype.h). matmul reads the rows instead of switching on
// types: the dot kernels each instruction set provides, the vectorized row conversions, the per-block scales an
// activation type hands its kernels, and the repacking of weights for batched products.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/cpu/dot_kernels.h"
#include "core/dtype.h"

namespace mopt::cpu {

// Per-block fp32 scales d and code sums s of n elements of an activation row, each [n / block_elems], computed once
// per matmul (ActRows::d, ActRows::s) for kernels that would otherwise work them out per (weight row, block).
using ActScalesFn = void (*)(const void* row, int64_t n, float* d, float* s);

// Weight rows converted once per matmul tile into a type with faster kernels, where the tile's rows meet at least
// min_rows activation rows (Q4_0 -> Q8_0: widening once costs less than decoding nibbles for every row group).
// fn converts n elements.
struct Repack {
  std::optional<DType> to;
  void (*fn)(const void* src, void* dst, int64_t n) = nullptr;
  int64_t min_rows = 0;
};

struct CpuFormat {
  DType type;
  const DotSet* dot[kNumDotIsa];  // per DotIsa: the kernels of that instruction set, nullptr where none
  ToFloatFn to_float;             // vectorized conversions, the same results as the dtype row's reference ones;
  FromFloatFn from_float;         //   nullptr: the reference is used
  ActScalesFn act_scales;         // as an activation type: precomputed block scales, nullptr where none
  Repack repack;
};

const CpuFormat& cpu_format(DType t);

}  // namespace mopt::cpu
