// --shape of bench_gpu_decode and bench_gpu_tp: the model shapes they run with random bf16 weights, and what a
// decode step of each must read. llama-3.1-8b (dense, the default; tests/gpu/llama-3.1-8b/config.json),
// llama-3.1-70b (dense, tensor-parallel benchmarks: it fits no single H200 in bf16), qwen3-30b-a3b, mixtral-8x7b and
// deepseek-v2-lite (mixture of experts, the shapes of their Hugging Face config.json files; DeepSeek-V2-Lite with
// multi-head latent attention and a dense first layer).
#pragma once

#include <cmath>
#include <optional>
#include <string_view>

#include "model/config.h"

namespace mopt::bench {

inline constexpr const char* kGpuShapeChoices =
    "llama-3.1-8b, llama-3.1-70b, qwen3-30b-a3b, mixtral-8x7b, deepseek-v2-lite";

// The shape `name` with `layers` layers (0: the model's own count), or nullopt for an unknown name.
inline std::optional<ModelConfig> gpu_shape(std::string_view name, int layers) {
  ModelConfig c;
  c.n_head = 32;
  c.head_dim = 128;
  c.rope_dim = 128;
  c.rope_style = RopeStyle::kNeox;
  if (name == "llama-3.1-8b" || name == "llama-3.1-70b") {  // 70B: 141 GB of bf16 weights, more than one H200
    const bool big = name == "llama-3.1-70b";
    c.arch = Arch::kLlama;
    c.name = big ? "Llama-3.1-70B" : "Llama-3.1-8B";
    c.n_vocab = 128256;
    c.n_embd = big ? 8192 : 4096;
    c.n_layer = big ? 80 : 32;
    c.n_head = big ? 64 : 32;
    c.n_head_kv = 8;
    c.n_ff = big ? 28672 : 14336;
    c.context_length = 131072;
    c.norm_eps = 1e-5f;
    c.rope_theta = 500000.f;
    c.rope_scaling = RopeScaling::kLlama3;
    c.rope_scale_factor = 8.f;
    c.rope_low_freq_factor = 1.f;
    c.rope_high_freq_factor = 4.f;
    c.rope_original_context = 8192;
  } else if (name == "qwen3-30b-a3b") {  // 30.5B parameters, 3.3B active: 128 experts of 768, top-8
    c.arch = Arch::kQwen3Moe;
    c.name = "Qwen3-30B-A3B";
    c.n_vocab = 151936;
    c.n_embd = 2048;
    c.n_layer = 48;
    c.n_head_kv = 4;
    c.n_ff = 6144;
    c.context_length = 40960;
    c.norm_eps = 1e-6f;
    c.rope_theta = 1000000.f;
    c.qk_norm = true;
    c.n_expert = 128;
    c.n_expert_used = 8;
    c.n_ff_exp = 768;
    c.expert_norm_topk = true;
  } else if (name == "mixtral-8x7b") {  // 46.7B parameters, 12.9B active: 8 experts of 14,336, top-2
    c.arch = Arch::kMixtral;
    c.name = "Mixtral-8x7B";
    c.n_vocab = 32000;
    c.n_embd = 4096;
    c.n_layer = 32;
    c.n_head_kv = 8;
    c.n_ff = 14336;
    c.context_length = 32768;
    c.norm_eps = 1e-5f;
    c.rope_theta = 1000000.f;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 14336;
    c.expert_norm_topk = true;
  } else if (name == "deepseek-v2-lite") {  // 15.7B parameters, 2.4B active: 64 experts of 1,408, top-6, 2 shared
    c.arch = Arch::kDeepseek2;
    c.name = "DeepSeek-V2-Lite";
    c.n_vocab = 102400;
    c.n_embd = 2048;
    c.n_layer = 27;
    c.n_head = 16;
    c.n_head_kv = 16;
    c.head_dim = 192;  // qk_nope 128 + qk_rope 64
    c.rope_dim = 64;
    c.rope_style = RopeStyle::kInterleaved;
    c.n_ff = 10944;
    c.context_length = 163840;
    c.norm_eps = 1e-6f;
    c.rope_theta = 10000.f;
    c.rope_scaling = RopeScaling::kYarn;
    c.rope_scale_factor = 40.f;
    c.rope_original_context = 4096;
    const float m = 0.1f * 0.707f * std::log(40.f) + 1.f;  // mscale_all_dim 0.707 (= mscale: attention factor 1)
    c.attn_scale_mult = m * m;
    c.n_expert = 64;
    c.n_expert_used = 6;
    c.n_ff_exp = 1408;
    c.n_ff_shexp = 2 * 1408;
    c.n_layer_dense_lead = 1;
    c.kv_lora_rank = 512;
    c.qk_nope_dim = 128;
    c.v_head_dim = 128;
  } else {
    return std::nullopt;
  }
  if (layers > 0) c.n_layer = layers;
  return c;
}

// Parameters of the linear layers one token runs through (attention, MLP or router + its experts + shared expert;
// no embedding, no LM head). MLA: q (or its LoRA pair), kv_a, kv_b and o as the checkpoint has them.
inline double active_linear_params(const ModelConfig& c) {
  const double d = c.n_embd;
  double attn = d * (c.q_dim() + 2.0 * c.kv_dim()) + static_cast<double>(c.q_dim()) * d;
  if (c.is_mla()) {
    const double H = c.n_head, qk = c.qk_nope_dim + c.rope_dim, kl = c.kv_lora_rank, ql = c.q_lora_rank;
    const double q = ql > 0 ? d * ql + ql * H * qk : d * H * qk;
    attn = q + d * (kl + c.rope_dim) + kl * H * (c.qk_nope_dim + c.v_head_dim) + H * c.v_head_dim * d;
  }
  const double moe = d * c.n_expert + 3.0 * d * c.n_ff_exp * c.n_expert_used + 3.0 * d * c.n_ff_shexp;
  const double n_moe = c.is_moe() ? c.n_layer - c.n_layer_dense_lead : 0.0;
  return static_cast<double>(c.n_layer) * attn + n_moe * moe + (c.n_layer - n_moe) * 3.0 * d * c.n_ff;
}

// Weight bytes a decode step of n_tokens tokens reads (es bytes per weight): all but the embedding table, and of
// each MoE layer's experts those its tokens are routed to: with routing spread evenly (random weights), the
// expected number of distinct experts, E (1 - (1 - k/E)^n_tokens); exactly k for one token.
inline double decode_step_bytes(const ModelConfig& c, double weight_bytes, double es, int n_tokens) {
  double b = weight_bytes - static_cast<double>(c.n_vocab) * c.n_embd * es;
  if (c.is_moe()) {
    const double E = c.n_expert, k = c.n_expert_used;
    const double touched = n_tokens == 1 ? k : E * (1.0 - std::pow(1.0 - k / E, n_tokens));
    b -= static_cast<double>(c.n_layer - c.n_layer_dense_lead) * 3.0 * c.n_embd * c.n_ff_exp * (E - touched) * es;
  }
  return b;
}

}  // namespace mopt::bench
