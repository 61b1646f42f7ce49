// Quantized test matrices for the CUDA backend's tests (quant_test.cpp, a8_test.cpp): a block-format tensor of
// random weights with its values as the tests' oracle decodes them, and a repacked matrix's copy on the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_weights.h"
#include "core/dtype.h"
#include "core/formats/formats.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/dequant_oracle.h"

namespace mopt::cudatest {

// A quantized tensor [rows, k] of type t from random weights (rows of different magnitudes), and its values as the
// oracle decodes them. per_tensor_fp8: one fp8 scale for every row (compressed-tensors' tensor strategy).
struct QTensor {
  std::vector<uint8_t> bytes;
  std::vector<float> ref;  // [rows, k]
  TensorView view;
};
inline QTensor make_tensor(DType t, int rows, int k, uint32_t seed, const std::string& name,
                           bool per_tensor_fp8 = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(static_cast<size_t>(rows) * k);
  for (int r = 0; r < rows; ++r) {
    const float mag = 0.25f + 0.75f * static_cast<float>(r % 7) / 6.f;
    for (int i = 0; i < k; ++i) w[static_cast<size_t>(r) * k + i] = mag * u(rng);
  }
  QTensor q;
  const uint64_t rb = *row_bytes(t, static_cast<uint64_t>(k));
  q.bytes.resize(rb * rows);
  float amax = 0.f;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  for (int r = 0; r < rows; ++r) {
    const float* src = w.data() + static_cast<size_t>(r) * k;
    uint8_t* dst = q.bytes.data() + rb * r;
    if (per_tensor_fp8) formats::fp8_quantize_row(src, amax / kE4M3Max, reinterpret_cast<BlockFP8*>(dst), k);
    else quantize_row_ref(t, src, dst, k);
  }
  q.ref.resize(w.size());
  for (int r = 0; r < rows; ++r)
    test::oracle::dequantize(t, q.bytes.data() + rb * r, q.ref.data() + static_cast<size_t>(r) * k, k);
  q.view.name = name;
  q.view.dtype = t;
  q.view.n_dims = 2;
  q.view.ne = {k, rows, 1, 1};
  q.view.data = q.bytes.data();
  q.view.nbytes = q.bytes.size();
  return q;
}

// A host vector as the std::vector DevVec uploads; {0} when empty (a valid device pointer for the kernels).
template <class T, class A>
std::vector<T> plain_or_zero(const std::vector<T, A>& v) {
  return v.empty() ? std::vector<T>{T{}} : std::vector<T>(v.begin(), v.end());
}

// A repacked matrix's codes, row scales and groups on the device, and its view for the kernels.
struct DevQuant {
  DevVec<uint8_t> codes;
  DevVec<float> scale, group;
  cuda::QuantWeightView view;
  explicit DevQuant(const cuda::HostQuantMatrix& m)
      : codes(plain_or_zero(m.codes)), scale(plain_or_zero(m.row_scale)), group(plain_or_zero(m.group)) {
    view = {.fmt = m.plan.fmt, .codes = codes.get(), .row_scale = m.row_scale.empty() ? nullptr : scale.get(),
            .group = m.group.empty() ? nullptr : group.get(), .group_size = m.plan.group_size,
            .affine = m.plan.affine};
  }
};

}  // namespace mopt::cudatest
