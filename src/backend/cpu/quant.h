// Row conversions on the CPU: the vectorized ones the CPU format table (formats.h) registers, and
// dequantize_row / quantize_row, which take a type's registered conversion where it has one and the reference
// conversion of its dtype row (core/formats) otherwise, with the same results either way.
// Block layouts: core/formats/formats.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/formats/formats.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mopt::cpu {

// Row conversions for every type with a dtype-table conversion (F32, F16, BF16 and the quantized types). n must be
// a multiple of the block size (MOPT_CHECK otherwise: callers validate shapes first); I8/I32 are not supported.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Dequantizes a small tensor (norms, biases) row by row into out [expect] fp32; an error names the tensor when it
// does not have `expect` elements.
Status tensor_to_f32(const TensorView& t, int64_t expect, std::vector<float>& out);
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// fp16 rows (F16C where available).
void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n);
void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);

// The vectorized conversions the CPU format table registers (signatures of core's ToFloatFn / FromFloatFn):
// bit-identical to the reference ones of the dtype rows.
void f16_to_float_fast(const void* src, float* dst, int64_t n);
void f16_from_float_fast(const float* src, void* dst, int64_t n);
void q8_0_from_float_fast(const float* src, void* dst, int64_t n);  // the Q8_0 / Q4_0 activation quantizer
void q8_k_from_float_fast(const float* src, void* dst, int64_t n);  // the K-quant activation quantizer

// The fp32 block scales and code sums of n elements of Q8_0 activations, each [n / 32]: d[i] = fp16_to_fp32(block
// i's d), s[i] = the sum of block i's 32 codes.
void q8_0_act_scales(const void* row, int64_t n, float* d, float* s);

// Widens n elements of Q4_0 blocks to Q8_0 (same scale, codes q - 8): exact, so Q8_0 kernels give identical products.
void widen_q4_0_to_q8_0(const void* src, void* dst, int64_t n);

}  // namespace mopt::cpu
