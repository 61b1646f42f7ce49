// Multi-head latent attention (DeepSeek-V2) on the CPU: the projections in front of the ordinary paged attention.
// Per token x [n_embd] (transformers' DeepseekV2Attention):
//   q [n_head, nope + rope] = q_proj(x), or q_b_proj(rmsnorm(q_a_proj(x))) when q_lora_rank > 0;
//   kv_a_proj_with_mqa(x) = [c_kv (kv_lora_rank) | k_pe (rope)]; kv_b_proj(rmsnorm(c_kv)) = per head [k_nope | v];
//   RoPE (c.rope_style: interleaved pairs for DeepSeek-V2) on each head's q_pe (its last rope dims) and on the one
//   k_pe, both then multiplied by the yarn attention factor (transformers scales cos and sin by it); every head's K is
//   [k_nope_h | k_pe].
// The KV cache then holds K and V per head at head_dim = nope + rope, V zero-padded from v_head_dim (docs/moe.md):
// the paged attention runs unchanged (scale 1 / sqrt(head_dim), as transformers), and mla_compact() drops the
// padding of its output before o_proj.
#pragma once

#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"

namespace mopt {
class Model;
}

namespace mopt::cpu {

struct MlaLayer {
  const TensorView* wq = nullptr;      // [n_embd, n_head * head_dim]; null when q_lora_rank > 0
  const TensorView* wq_a = nullptr;    // [n_embd, q_lora_rank]
  const TensorView* wq_b = nullptr;    // [q_lora_rank, n_head * head_dim]
  std::vector<float> q_a_norm;         // [q_lora_rank]
  const TensorView* wkv_a = nullptr;   // [n_embd, kv_lora_rank + rope_dim]
  std::vector<float> kv_a_norm;        // [kv_lora_rank]
  const TensorView* wkv_b = nullptr;   // [kv_lora_rank, n_head * (qk_nope_dim + v_head_dim)]
};

// Finds layer l's tensors (shapes were checked by finalize_model; the CPU runner checks that matmul takes the
// matrices' types) and copies its norms to fp32.
Result<MlaLayer> mla_layer(const Model& m, int l);

struct MlaScratch {
  std::vector<float> qa;   // [T, q_lora_rank]
  std::vector<float> kva;  // [T, kv_lora_rank + rope_dim]
  std::vector<float> kvb;  // [T, n_head * (qk_nope_dim + v_head_dim)]
};

// q, k, v [T, n_head * head_dim] of x [T, n_embd]; cs / sn [T, rope_dim / 2] each token's RoPE cos / sin.
void mla_qkv(const ModelConfig& c, const MlaLayer& L, const float* x, int T, const float* cs, const float* sn,
             float* q, float* k, float* v, MlaScratch& s, ThreadPool* pool);

// In place: att [T, n_head, head_dim] -> [T, n_head * v_head_dim] (each head's first v_head_dim values).
void mla_compact(const ModelConfig& c, float* att, int T);

}  // namespace mopt::cpu
