// Architecture tables, in one place: names per format (GGUF general.architecture, Hugging Face class),
// per-arch traits, the Hugging Face -> canonical tensor name map, and the tensors (with shapes) each
// architecture instance needs. Every loader and `finalize_model` go through these.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace mopt {

struct ArchInfo {
  Arch arch;
  const char* name;         // our name ("llama")
  const char* gguf_name;    // general.architecture
  const char* hf_class;     // config.json "architectures"[0]
  const char* hf_model_type;  // config.json "model_type"
  RopeStyle gguf_rope;      // RoPE pairing of GGUF files of this arch (llama.cpp permutes Q/K for "llama")
  bool qkv_bias;            // Q/K/V projections carry biases
  bool qk_norm;             // per-head RMSNorm on q and k
};

const ArchInfo& arch_info(Arch a);
// GGUF general.architecture -> Arch. "llama" also covers Mistral-family GGUF files.
std::optional<Arch> arch_from_gguf(std::string_view name);
// Hugging Face class name ("Qwen2ForCausalLM") or model_type ("qwen2") -> Arch.
std::optional<Arch> arch_from_hf(std::string_view class_or_model_type);
// "llama, mistral, qwen2, qwen3" for error messages.
std::string supported_arch_list(bool hf_classes);
// An architecture (Hugging Face class, model_type or GGUF name) mopt knows and refuses, with the reason
// (DeepSeek-V2/V3: multi-head latent attention); nullopt for any other name.
std::optional<std::string> unsupported_arch_reason(std::string_view name);

// Hugging Face tensor name -> canonical name ("model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight").
// nullopt for names that do not map (callers decide whether to keep or drop them).
std::optional<std::string> hf_to_canonical_name(std::string_view hf_name);
// True for HF tensors that carry no weights we use and are safe to drop (e.g. rotary_emb.inv_freq buffers).
bool hf_ignorable_tensor(std::string_view hf_name);
// The inverse: canonical name -> Hugging Face name ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"),
// for writing checkpoints; nullopt for names the table does not hold.
std::optional<std::string> canonical_to_hf_name(std::string_view canonical);

// A tensor an architecture instance needs, with its shape in ne order (ne[0] contiguous).
struct TensorSpec {
  std::string name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  bool is_norm = false;  // RMSNorm weight (dummy weights initialise these to 1)
  std::string shape_str() const;
};
// Every tensor the forward pass reads for this config, in a stable order (token_embd, layers, output_norm, output).
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);

// Range checks on a config (positive sizes, heads divide, rope dims, eps); errors say which field is wrong.
Status validate_config(const ModelConfig& c);

// Layer index of a canonical per-layer name ("blk.12.ffn_up.weight" -> 12); nullopt for other names.
std::optional<int> layer_of_tensor(std::string_view canonical_name);

}  // namespace mopt
