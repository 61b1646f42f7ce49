// ModelConfig: everything the forward pass needs to know about an architecture instance.
// Filled by the loaders from GGUF metadata, a Hugging Face config.json, or a llama2.c header.
#pragma once

#include <cstdint>
#include <string>

namespace mopt {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen2Moe, kQwen3Moe, kDeepseek2 };
const char* arch_name(Arch a);

// How RoPE pairs dimensions: interleaved (x[2i], x[2i+1]) as in GGUF llama and llama2.c,
// or NeoX / Hugging Face "rotate_half" (x[i], x[i + rot_dim/2]).
enum class RopeStyle { kInterleaved, kNeox };

enum class RopeScaling { kNone, kLinear, kLlama3, kYarn };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name;             // general.name or folder name
  int n_vocab = 0;
  int n_embd = 0;               // hidden size
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;             // usually n_embd / n_head (Qwen3 may differ)
  int n_ff = 0;                 // MLP intermediate size
  int context_length = 0;       // trained context
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;             // rotated dims per head (== head_dim unless partial rotary)
  RopeStyle rope_style = RopeStyle::kInterleaved;
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale_factor = 1.0f;          // linear / llama3 factor
  float rope_low_freq_factor = 1.0f;       // llama3
  float rope_high_freq_factor = 4.0f;      // llama3
  int rope_original_context = 8192;        // llama3 / yarn original_max_position_embeddings
  // YaRN (DeepSeek-V2, as transformers' _compute_yarn_parameters): frequencies ramp between interpolated (/ factor)
  // and original over the dims [beta_fast, beta_slow] rotations map to; the rotated q/k parts are scaled by
  // rope_attn_factor (transformers multiplies cos and sin by it).
  float rope_yarn_beta_fast = 32.0f;
  float rope_yarn_beta_slow = 1.0f;
  bool rope_yarn_truncate = true;          // floor / ceil the correction range
  float rope_attn_factor = 1.0f;           // yarn attention factor (1 otherwise)
  // Multiplies the attention's softmax scale 1/sqrt(head_dim): DeepSeek-V2 with yarn and mscale_all_dim,
  // (0.1 mscale_all_dim ln(factor) + 1)^2, as transformers' DeepseekV2Attention (and DeepSeek's code); 1 otherwise.
  float attn_scale_mult = 1.0f;
  bool qkv_bias = false;                   // Qwen2
  bool qk_norm = false;                    // Qwen3: RMSNorm on q and k per head
  bool tied_embeddings = false;            // output projection reuses token_embd
  int sliding_window = 0;                  // 0 = none (Mistral v0.1 uses 4096)
  // Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): every layer's MLP is a routed expert layer when n_expert > 0.
  // Router: softmax over all n_expert logits, the n_expert_used largest probabilities, divided by their sum when
  // expert_norm_topk. Qwen2-MoE adds a shared expert (n_ff_shexp > 0) scaled by sigmoid(its gate · x).
  int n_expert = 0;                        // experts per layer; 0 = dense MLP
  int n_expert_used = 0;                   // experts per token (top-k)
  int n_ff_exp = 0;                        // one expert's intermediate size
  int n_ff_shexp = 0;                      // shared expert's intermediate size; 0 = none
  bool expert_norm_topk = false;           // renormalize the top-k probabilities to sum to 1
  // DeepSeek-V2 (DeepSeekMoE): the first n_layer_dense_lead layers have a dense MLP (n_ff); the shared experts are
  // one SwiGLU of n_ff_shexp without a gate; routed weights are multiplied by expert_weights_scale; with
  // n_expert_groups > 0 (group_limited_greedy) only the n_group_used groups of experts with the highest best
  // probability are eligible.
  int n_layer_dense_lead = 0;
  float expert_weights_scale = 1.0f;       // routed_scaling_factor
  int n_expert_groups = 0;                 // 0 = plain top-k (greedy)
  int n_group_used = 0;                    // topk_group
  // Multi-head latent attention (DeepSeek-V2), when kv_lora_rank > 0: head_dim = qk_nope_dim + qk_rope_dim (K and
  // the cached, zero-padded V), rope_dim = qk_rope_dim (the last dims of each head), n_head_kv = n_head.
  // The RMSNorms of the q and kv latents use transformers' (and DeepSeek's) default epsilon, not rms_norm_eps.
  static constexpr float kMlaLatentNormEps = 1e-6f;
  int q_lora_rank = 0;                     // 0: one q_proj; else q_a_proj -> RMSNorm -> q_b_proj
  int kv_lora_rank = 0;
  int qk_nope_dim = 0;
  int v_head_dim = 0;

  bool is_moe() const { return n_expert > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Layer l's MLP is the routed experts (else dense, n_ff).
  bool is_moe_layer(int l) const { return is_moe() && l >= n_layer_dense_lead; }
  // The shared expert is scaled by sigmoid(its gate row · x) (Qwen2-MoE); DeepSeek-V2's shared experts have no gate.
  bool shared_expert_gated() const { return n_ff_shexp > 0 && arch != Arch::kDeepseek2; }
  // Width of the attention output (o_proj's input): n_head * v_head_dim under MLA.
  int attn_out_dim() const { return is_mla() ? n_head * v_head_dim : q_dim(); }

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  // Bytes of K+V per token in the cache at element size `elem_bytes`.
  uint64_t kv_bytes_per_token(int elem_bytes) const {
    return 2ull * static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(kv_dim()) * elem_bytes;
  }
};

}  // namespace mopt
