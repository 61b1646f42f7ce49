// Non-owning view of a tensor in memory (usually a zero-copy view into a memory-mapped model file).
// Dimension order follows GGUF/ggml: ne[0] is the contiguous (innermost) dimension.
// A weight matrix W used as y = W x has ne[0] = in_features (K) and ne[1] = out_features (N),
// i.e. the same bytes as a row-major PyTorch [N, K] tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace mopt {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // [ne0 (contiguous), ne1, ne2, ne3]
  const void* data = nullptr;
  uint64_t nbytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  // "[4096, 11008]" in ne order.
  std::string shape_str() const;
};

}  // namespace mopt
