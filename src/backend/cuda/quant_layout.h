// Which device format (weight_format.h) a quantized matrix takes in the CUDA backend, and its size there.
// Header-only and free of CUDA headers: the backend (a shared object) and mopt plan (which never loads it) both
// size device copies with it. The layouts and the source formats they take: quant_weights.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>

#include "backend/cuda/weight_format.h"
#include "core/dtype.h"

namespace mopt::cuda {

// The device format of a matrix stacked from parts of some dtypes.
struct QuantPlan {
  WeightFormat fmt = WeightFormat::kFloat;
  int group_size = 0;     // G (0: row scales)
  bool affine = false;
};

// Inputs per group of a source format's (a, b) parameters; 0 where it has no device format.
inline int natural_group(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
    case DType::INT8:
      return 32;
    case DType::Q6_K: return 16;
    case DType::INT4_G128: return 128;
    default: return 0;
  }
}
inline bool needs_offset(DType t) {
  return t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K || t == DType::INT4_G128;
}
inline bool four_bit(DType t) { return t == DType::Q4_0 || t == DType::Q4_K || t == DType::INT4_G128; }

// The device format of a matrix stacked from parts of these dtypes (nullopt: none, see quant_weights.h).
inline std::optional<QuantPlan> plan_quantized(std::span<const DType> parts) {
  if (parts.empty()) return std::nullopt;
  const bool all_fp8 = std::all_of(parts.begin(), parts.end(), [](DType t) { return t == DType::FP8; });
  if (all_fp8) return QuantPlan{WeightFormat::kFp8, 0, false};
  const bool all_int8 = std::all_of(parts.begin(), parts.end(), [](DType t) { return t == DType::INT8; });
  if (all_int8) return QuantPlan{WeightFormat::kInt8, 0, false};
  int g = 1 << 30;
  bool affine = false, nib = true;
  for (DType t : parts) {
    const int ng = natural_group(t);
    if (ng == 0) return std::nullopt;
    g = std::min(g, ng);
    affine = affine || needs_offset(t);
    nib = nib && four_bit(t);
  }
  if (nib) return QuantPlan{WeightFormat::kNib4, g, true};
  return QuantPlan{WeightFormat::kInt8, g, affine};
}

// Whether a matrix of k inputs per row can take plan's format: a quantized format, k a multiple of its 16-byte chunk
// and of its group, the group a multiple of the chunk.
inline bool plan_fits(const QuantPlan& plan, int64_t k) {
  const int chunk = weight_chunk_elems(plan.fmt), g = plan.group_size;
  return plan.fmt != WeightFormat::kFloat && k > 0 && k % chunk == 0 && (g == 0 || (g % chunk == 0 && k % g == 0));
}

// Bytes on the device of a matrix [n, k] in plan's format (codes + row scales + groups).
inline uint64_t quant_matrix_bytes(const QuantPlan& plan, int64_t n, int64_t k) {
  const uint64_t nn = static_cast<uint64_t>(n), kk = static_cast<uint64_t>(k);
  uint64_t bytes = plan.fmt == WeightFormat::kNib4 ? nn * kk / 2 : nn * kk;
  if (plan.group_size == 0) bytes += nn * 4;
  else bytes += nn * (kk / static_cast<uint64_t>(plan.group_size)) * (plan.affine ? 8 : 4);
  return bytes;
}

}  // namespace mopt::cuda
