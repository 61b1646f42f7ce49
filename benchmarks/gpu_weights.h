// --weights of the GPU benchmarks (gpu_decode.cpp, gpu_offline.cpp): the format of the random linear-layer weights
// (CudaRunnerExtras::random_weight_dtype), quantized on the GPU from the random bf16 ones, so no file is needed.
// The benchmarks' ceilings use the runner's weight bytes, so each figure is printed beside its own format's
// weight-bandwidth ceiling.
#pragma once

#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace mopt::bench {

inline constexpr const char* kGpuWeightChoices = "bf16, fp8, int8, int4 (AWQ, group 128), q8_0, q4_0, q4_k, q6_k";

inline std::optional<DType> gpu_weights_dtype(std::string_view name) {
  struct Row {
    std::string_view name;
    DType type;
  };
  static constexpr Row rows[] = {{"bf16", DType::BF16}, {"fp8", DType::FP8},   {"int8", DType::INT8},
                                 {"int4", DType::INT4_G128}, {"q8_0", DType::Q8_0}, {"q4_0", DType::Q4_0},
                                 {"q4_k", DType::Q4_K}, {"q6_k", DType::Q6_K}};
  for (const Row& r : rows)
    if (r.name == name) return r.type;
  return std::nullopt;
}

}  // namespace mopt::bench
