// The grid GPTQ rounds a weight matrix onto, in the block format that is written (Q8_0, Q4_0: GGUF; INT8, INT4_G128:
// the int8 and awq safetensors layouts), filled one column at a time: a group's scale (and zero point) is set when
// GPTQ reaches the group, from the weights as they are then, by the same rule as the format's round-to-nearest
// conversion; each weight is then rounded onto its group's grid and its code stored. The result is the matrix in the
// format, with exactly the codes and scales GPTQ chose: the writers write these bytes, they never re-derive them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mopt::quant {

class WeightGrid {
 public:
  // True for the formats GPTQ writes: Q8_0, Q4_0, INT8, INT4_G128.
  static bool supports(DType t);

  // A matrix [N, K] in `type` (K a multiple of its block). INT8 has one scale per row, stored in `row_scale_type`
  // (F32, F16, BF16: the int8 layout's weight_scale) and rounded up as round_up_scale() does.
  WeightGrid(DType type, int64_t N, int64_t K, DType row_scale_type = DType::F32);

  DType type() const { return type_; }
  // Columns that share a scale: 32 (Q8_0, Q4_0), 128 (INT4_G128), K (INT8: one per row).
  int64_t group() const { return group_; }

  // Row n's scale (and zero point) for the group of columns k0 .. k0 + group() - 1 (k0 a multiple of group()) from
  // the group's values x [group()], by the format's round-to-nearest rule:
  //   Q8_0      d = max|x| / 127 (fp16)                   codes -127..127, value d q
  //   Q4_0      d = x_m / -8, x_m the x of largest |x| (fp16)   codes 0..15, value d (q - 8)
  //   INT4_G128 d = (hi - lo) / 15 over x and 0 (fp16), z = round(-lo / d) in 0..15; codes 0..15, value d (q - z)
  //   INT8      d = max|x| / 127 rounded up to row_scale_type    codes -127..127, value d q
  void set_scale(int64_t n, int64_t k0, const float* x);

  // Rounds x (row n, column k) to the nearest code of its group's grid, clamped to the code range; stores the code
  // and returns the value it stands for, exactly as the format's dequantization computes it.
  float round(int64_t n, int64_t k, float x);

  // The matrix in `type`: N rows of row_bytes(type, K) bytes.
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  DType type_;
  int64_t N_, K_, group_;
  DType row_scale_type_;
  uint64_t row_bytes_;
  std::vector<uint8_t> bytes_;
};

}  // namespace mopt::quant
