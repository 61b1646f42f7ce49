// The fp32 reference forward pass: the oracle every fast path is tested against.
// Deliberately plain (llama2.c style): weights dequantized to fp32 once, contiguous KV, naive loops,
// its own RoPE and attention code. It shares nothing with the CPU kernels: weights go through the dtype table's
// reference dequantization (dequantize_row_ref).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "backend/reference/reference_moe.h"
#include "model/config.h"

namespace mopt {

class Model;

class ReferenceModel {
 public:
  static Result<ReferenceModel> create(const Model& model);

  // Runs the tokens as one sequence from position 0 (resets state) and returns logits [n_tokens, n_vocab].
  std::vector<float> forward(const std::vector<int32_t>& tokens);
  // MoE models: the experts the last forward() routed each token to, with their weights,
  // [n_layer][n_tokens][n_expert_used], best first.
  const std::vector<std::vector<std::vector<ReferenceMoe::Pick>>>& routed() const { return routed_; }
  const ModelConfig& config() const { return cfg_; }

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;       // [n_embd]
    std::vector<float> wq, wk, wv, wo;            // [q_dim, n_embd], [kv_dim, n_embd], [kv_dim, n_embd], [n_embd, q_dim]
                                                  // (MLA: wo [n_embd, n_head * v_head_dim])
    std::vector<float> bq, bk, bv;                // [q_dim], [kv_dim], [kv_dim] (Qwen2) or empty
    std::vector<float> q_norm, k_norm;            // [head_dim] (Qwen3) or empty
    // Multi-head latent attention (DeepSeek-V2): wq [q_dim, n_embd] or q_a [q_lora, n_embd] + q_a_norm + q_b
    // [q_dim, q_lora]; kv_a [kv_lora + rope, n_embd], kv_a_norm [kv_lora], kv_b [n_head * (nope + v), kv_lora].
    std::vector<float> q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b;
    std::vector<float> w_gate, w_up, w_down;      // [n_ff, n_embd], [n_ff, n_embd], [n_embd, n_ff] (dense)
    ReferenceMoe moe;                             // MoE models
  };
  std::vector<std::vector<std::vector<ReferenceMoe::Pick>>> routed_;  // see routed()
  ModelConfig cfg_;
  std::vector<float> tok_embd_;   // [n_vocab, n_embd]
  std::vector<float> out_norm_;   // [n_embd]
  std::vector<float> output_;     // [n_vocab, n_embd] (copy of tok_embd_ when tied)
  std::vector<Layer> layers_;
  // MLA: q, k, v [n_head * head_dim] of the normed x at position pos (V zero-padded to head_dim, as the CPU cache).
  void mla_qkv(const Layer& L, const float* x, int pos, float* q, float* k, float* v) const;
};

}  // namespace mopt
