// How the CUDA backend stores a linear layer's weight matrix (kernels.h's launchers take it; quant_layout.h
// sizes it). Plain C++ without CUDA headers, so that code outside the backend (mopt plan) can size device copies.
#pragma once

namespace mopt::cuda {

// How a linear layer's weight matrix [n outputs, k inputs] is stored on the device.
//   kFloat: the compute dtype (bf16 or fp32), [n, k] row-major
//   kFp8:   E4M3 codes [n, k] (1 byte each), fp32 row_scale [n]                      w = row_scale[n] * e4m3(q)
//   kInt8:  int8 codes [n, k], row_scale [n] (per channel) and / or groups:          w = (a * q + b) * row_scale
//   kNib4:  4-bit codes, 16 bytes per 32 consecutive inputs (byte j: input j in the low nibble, input j + 16 in
//           the high one), [n, k / 2] bytes; groups (a, b) always affine:            w = a * q + b
// Groups: `group` holds, per row n and group g of group_size consecutive inputs, a (affine: a and b, interleaved)
// as fp32: [n, k / group_size] or [n, k / group_size, 2]. Every GGUF / AWQ / INT8 block format maps onto one of
// these exactly (quant_weights.h).
enum class WeightFormat : int { kFloat = 0, kFp8 = 1, kInt8 = 2, kNib4 = 3 };

// Inputs covered by one 16-byte chunk of codes: k must be a multiple of it (and of group_size, itself a multiple of
// it; quant_layout.h, plan_fits).
constexpr int weight_chunk_elems(WeightFormat f) {
  return f == WeightFormat::kNib4 ? 32 : f == WeightFormat::kFloat ? 8 : 16;
}

}  // namespace mopt::cuda
