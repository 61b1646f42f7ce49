// Quantized Hugging Face checkpoints in the layouts GPU servers load (vLLM, transformers): the quantization_config
// of config.json, the tensors of each quantized linear layer read into the dtype table's block formats (FP8, INT8,
// INT4_G128), and the packing both directions use (mopt quantize writes these layouts with the same functions).
// docs/quantize.md describes each layout against its public description; in short, per linear layer <p>
// ("model.layers.3.self_attn.q_proj") with W [N out, K in]:
//
// compressed-tensors "float-quantized" (llm-compressor's FP8 schemes), and vLLM's "fp8" quant_method:
//   <p>.weight F8_E4M3 [N, K], <p>.weight_scale (any float type) [N, 1] per channel or [1] / [] per tensor:
//   W = weight_scale * e4m3. Activations: dynamic, per token (mopt scales per token whatever the granularity named).
// compressed-tensors "pack-quantized", 8 bits, symmetric, per channel, weight-only (W8A16):
//   <p>.weight_packed I32 [N, K/4]: byte j (bits 8j..8j+7) of word c is q[4c + j] + 128; <p>.weight_scale [N, 1];
//   <p>.weight_shape I64 [2] = {N, K}: W = weight_scale * q.
// AutoAWQ GEMM (quant_method "awq", version "gemm", 4 bits, group_size 128, zero_point true), weight-only:
//   <p>.qweight I32 [K, N/8], <p>.qzeros I32 [K/128, N/8], <p>.scales F16 [K/128, N]; nibble i (bits 4i..4i+3) of
//   word c holds column 8c + kAwqOrder[i] (kAwqOrder below), the same for the zero points:
//   W[n, k] = scales[k/128, n] * (q[k, n] - z[k/128, n]).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/formats/formats.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mopt {

enum class HfQuantLayout { kNone, kFp8, kInt8, kAwq };

struct HfQuantConfig {
  HfQuantLayout layout = HfQuantLayout::kNone;
  std::string method;  // quant_method as written ("compressed-tensors", "fp8", "awq")
};

// config.json's "quantization_config" (absent or null: kNone). A method, format, bit width, group size, strategy or
// activation scheme mopt does not run is an error that names the field and lists what is supported.
Result<HfQuantConfig> parse_hf_quant_config(const nlohmann::json& config);

// Replaces the parts of every quantized linear layer among `tensors` (safetensors views under their Hugging Face
// names) by one tensor "<p>.weight" of the layout's block format, converted into a buffer appended to `owned`.
// Parts that do not fit together (shapes, dtypes, a missing scale) are errors naming the layer.
Status assemble_hf_quant(const HfQuantConfig& qc, std::vector<TensorView>& tensors,
                         std::vector<std::vector<uint8_t>>& owned);

// AutoAWQ's GEMM packing order: nibble i of a packed word holds column 8c + kAwqOrder[i].
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// INT4_G128 rows [N, K] (K / 128 blocks each) <-> AutoAWQ GEMM tensors. N % 8 == 0, K % 128 == 0.
struct AwqPacked {
  std::vector<int32_t> qweight;  // [K, N/8]
  std::vector<int32_t> qzeros;   // [K/128, N/8]
  std::vector<uint16_t> scales;  // [K/128, N] fp16
};
AwqPacked awq_pack(const BlockINT4_G128* w, int64_t N, int64_t K);
void awq_unpack(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales, int64_t N, int64_t K,
                BlockINT4_G128* out);

// INT8 rows [N, K] <-> compressed-tensors pack-quantized 8-bit words [N, K/4] (the scales are the blocks' d).
// K % 32 == 0.
std::vector<int32_t> int8_pack(const BlockINT8* w, int64_t N, int64_t K);
void int8_unpack(const int32_t* packed, const float* scales /* [N] */, int64_t N, int64_t K, BlockINT8* out);

}  // namespace mopt
