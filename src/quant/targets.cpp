// The target table and the GGUF mixes (targets.h; the tensor-by-tensor tables are in docs/quantize.md).
#include "quant/targets.h"

#include "core/status.h"
#include "core/table.h"
#include "model/arch.h"

namespace mopt::quant {

namespace {

// Fields as in TargetInfo. llama_ftype values are llama.cpp's (LLAMA_FTYPE_MOSTLY_*).
constexpr TargetInfo kTargets[] = {
    {Target::kQ8_0, "q8_0", true, DType::Q8_0, 7, "GGUF, 8-bit blocks of 32 (llama.cpp Q8_0)"},
    {Target::kQ4_0, "q4_0", true, DType::Q4_0, 2, "GGUF, 4-bit blocks of 32 (llama.cpp Q4_0), output in Q6_K"},
    {Target::kQ4_K_M, "q4_k_m", true, DType::Q4_K, 15, "GGUF, llama.cpp's Q4_K_M mix (Q4_K, some tensors Q6_K)"},
    {Target::kQ5_K_M, "q5_k_m", true, DType::Q5_K, 17, "GGUF, llama.cpp's Q5_K_M mix (Q5_K, some tensors Q6_K)"},
    {Target::kQ6_K, "q6_k", true, DType::Q6_K, 18, "GGUF, 6-bit K-quant (llama.cpp Q6_K)"},
    {Target::kFp8, "fp8", false, DType::FP8, 0,
     "safetensors, compressed-tensors fp8: E4M3 weights with per-channel scales, activations per token"},
    {Target::kInt8, "int8", false, DType::INT8, 0,
     "safetensors, compressed-tensors pack-quantized: int8 weights per output channel, weight-only"},
    {Target::kAwq, "awq", false, DType::INT4_G128, 0,
     "safetensors, AutoAWQ GEMM: int4 weights, groups of 128 with zero points (activation-aware scales)"},
};

// llama.cpp's LLM_TYPE_70B for the architectures mopt runs: 80 layers with grouped-query attention.
bool is_70b(const ModelConfig& c) { return c.n_layer == 80 && c.n_head_kv < c.n_head; }

}  // namespace

std::span<const TargetInfo> targets() { return kTargets; }

const TargetInfo& target_info(Target t) { return table_row(kTargets, &TargetInfo::target, t); }

std::optional<Target> target_from_name(std::string_view name) {
  return table_key(kTargets, &TargetInfo::target, &TargetInfo::name, name);
}

std::string target_names() {
  std::string out;
  for (const TargetInfo& i : kTargets) out += (out.empty() ? "" : ", ") + std::string(i.name);
  return out;
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

DType gguf_tensor_type(Target t, const ModelConfig& c, bool has_output, const std::string& name, int n_dims,
                       int64_t ne0) {
  const TargetInfo& info = target_info(t);
  MOPT_CHECK(info.gguf, "gguf_tensor_type: %s is no GGUF target", info.name);
  if (n_dims < 2) return DType::F32;
  const bool mix_m = t == Target::kQ4_K_M || t == Target::kQ5_K_M;
  const std::optional<int> layer = layer_of_tensor(name);
  DType type = info.base;
  if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
    if (ne0 % 256 != 0) {
      type = DType::Q8_0;
    } else if (type != DType::Q8_0) {
      type = DType::Q6_K;
    }
  } else if (name.ends_with("attn_v.weight") && layer) {
    if (mix_m && use_more_bits(*layer, c.n_layer)) type = DType::Q6_K;
    if (is_70b(c) && type == DType::Q4_K) type = DType::Q5_K;
  } else if (name.ends_with("ffn_down.weight") && layer) {
    if (mix_m && use_more_bits(*layer, c.n_layer)) type = DType::Q6_K;
  }
  // Rows that are no multiple of the type's block: llama.cpp's fallbacks.
  if (ne0 % dtype_traits(type).block_elems != 0) {
    switch (type) {
      case DType::Q4_K: type = DType::Q5_0; break;
      case DType::Q5_K: type = DType::Q5_1; break;
      case DType::Q6_K: type = DType::Q8_0; break;
      default: break;
    }
    if (ne0 % dtype_traits(type).block_elems != 0) type = DType::F16;
  }
  return type;
}

}  // namespace mopt::quant
