#include "model/arch.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/strfmt.h"
#include "core/table.h"

namespace mopt {

namespace {

// The one architecture table. Order follows the Arch enum.
const ArchInfo kArchs[] = {
    {Arch::kLlama, "llama", "llama", "LlamaForCausalLM", "llama", RopeStyle::kInterleaved, false, false},
    {Arch::kMistral, "mistral", "mistral", "MistralForCausalLM", "mistral", RopeStyle::kInterleaved, false, false},
    {Arch::kQwen2, "qwen2", "qwen2", "Qwen2ForCausalLM", "qwen2", RopeStyle::kNeox, true, false},
    {Arch::kQwen3, "qwen3", "qwen3", "Qwen3ForCausalLM", "qwen3", RopeStyle::kNeox, false, true},
    // GGUF files of Mixtral say "llama" (with llama.expert_count > 0): config_from_gguf tells them apart.
    {Arch::kMixtral, "mixtral", "llama", "MixtralForCausalLM", "mixtral", RopeStyle::kInterleaved, false, false},
    {Arch::kQwen2Moe, "qwen2moe", "qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", RopeStyle::kNeox, true, false},
    {Arch::kQwen3Moe, "qwen3moe", "qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", RopeStyle::kNeox, false, true},
    // Hugging Face folders only: GGUF "deepseek2" files are refused (unsupported_arch_reason).
    {Arch::kDeepseek2, "deepseek2", "deepseek2", "DeepseekV2ForCausalLM", "deepseek_v2", RopeStyle::kInterleaved, false,
     false},
};

// Per-layer Hugging Face suffix -> canonical suffix (after "model.layers.N." / "blk.N.").
struct NamePair {
  const char* hf;
  const char* canonical;
};
const NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // Mixture of experts: the router and Qwen2-MoE's shared expert. The experts themselves are separate tensors per
    // expert (or fused 3-D tensors) in Hugging Face checkpoints; model/hf_experts.h stacks them.
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},  // Mixtral's original spelling (before transformers 5)
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    // DeepSeek-V2: multi-head latent attention (llama.cpp's names) and the shared experts (after Qwen2-MoE's
    // spelling, which canonical_to_hf_name gives; mopt synth respells them for DeepSeek-V2).
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};
const NamePair kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Parses a decimal layer index at the start of `s` followed by '.'; returns the index and the rest.
std::optional<std::pair<int, std::string_view>> split_layer(std::string_view s) {
  int n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p == s.data() || n < 0 || p == s.data() + s.size() || *p != '.') return std::nullopt;
  if (s[0] == '0' && p - s.data() > 1) return std::nullopt;  // no leading zeros: one spelling per layer
  return std::make_pair(n, std::string_view(p + 1, static_cast<size_t>(s.data() + s.size() - p - 1)));
}

TensorSpec spec(std::string name, std::initializer_list<int64_t> ne, bool is_norm = false) {
  TensorSpec t;
  t.name = std::move(name);
  for (int64_t d : ne) t.ne[static_cast<size_t>(t.n_dims++)] = d;
  t.is_norm = is_norm;
  return t;
}

}  // namespace

const char* arch_name(Arch a) { return arch_info(a).name; }

const ArchInfo& arch_info(Arch a) { return table_row(kArchs, &ArchInfo::arch, a); }

std::optional<Arch> arch_from_gguf(std::string_view name) {
  return table_key(kArchs, &ArchInfo::arch, &ArchInfo::gguf_name, name);
}

std::optional<Arch> arch_from_hf(std::string_view s) {
  for (const auto& i : kArchs)
    if (s == i.hf_class || s == i.hf_model_type) return i.arch;
  return std::nullopt;
}

std::string supported_arch_list(bool hf_classes) {
  std::vector<std::string> names;  // GGUF "llama" covers Mixtral too: each name once
  for (const auto& i : kArchs) {
    const char* name = hf_classes ? i.hf_class : i.gguf_name;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::optional<std::string> unsupported_arch_reason(std::string_view name) {
  for (std::string_view v3 : {"DeepseekV3ForCausalLM", "deepseek_v3", "deepseek3"})
    if (name == v3)
      return strfmt("architecture \"%.*s\" (DeepSeek-V3: sigmoid routing with a correction bias, noaux_tc) is not "
                    "supported (mixture-of-experts models that load: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 as a "
                    "Hugging Face folder)", static_cast<int>(name.size()), name.data());
  if (name == "deepseek2")  // GGUF general.architecture; the Hugging Face names load
    return std::string("GGUF architecture \"deepseek2\" is not supported: mopt runs DeepSeek-V2 from Hugging Face "
                       "folders (safetensors) only");
  return std::nullopt;
}

namespace {

// One name in the other spelling: Hugging Face -> canonical when `to_canonical`, else the reverse.
std::optional<std::string> convert_name(std::string_view name, bool to_canonical) {
  auto from = [&](const NamePair& p) { return std::string_view(to_canonical ? p.hf : p.canonical); };
  auto to = [&](const NamePair& p) { return to_canonical ? p.canonical : p.hf; };
  for (const auto& p : kGlobalNames)
    if (name == from(p)) return std::string(to(p));
  const std::string_view prefix = to_canonical ? "model.layers." : "blk.";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  auto split = split_layer(name.substr(prefix.size()));
  if (!split) return std::nullopt;
  for (const auto& p : kLayerNames)
    if (split->second == from(p))
      return strfmt("%s%d.%s", to_canonical ? "blk." : "model.layers.", split->first, to(p));
  return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_to_canonical_name(std::string_view hf) { return convert_name(hf, true); }

std::optional<std::string> canonical_to_hf_name(std::string_view name) { return convert_name(name, false); }

bool hf_ignorable_tensor(std::string_view hf) {
  constexpr std::string_view kInvFreq = "rotary_emb.inv_freq";
  return hf.size() >= kInvFreq.size() && hf.substr(hf.size() - kInvFreq.size()) == kInvFreq;
}

std::optional<int> layer_of_tensor(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  auto split = split_layer(name.substr(kPrefix.size()));
  if (!split) return std::nullopt;
  return split->first;
}

std::string TensorSpec::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += strfmt(i ? ", %lld" : "%lld", static_cast<long long>(ne[static_cast<size_t>(i)]));
  return s + "]";
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t e = c.n_embd, q = c.q_dim(), kv = c.kv_dim(), ff = c.n_ff, v = c.n_vocab, hd = c.head_dim;
  std::vector<TensorSpec> out;
  out.push_back(spec("token_embd.weight", {e, v}));
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [l](const char* s) { return strfmt("blk.%d.%s", l, s); };
    out.push_back(spec(n("attn_norm.weight"), {e}, true));
    if (c.is_mla()) {  // q [n_head, nope + rope]; kv_a -> [kv_lora_rank | rope]; kv_b -> [n_head, nope + v]
      const int64_t ql = c.q_lora_rank, kl = c.kv_lora_rank, r = c.rope_dim;
      if (ql > 0) {
        out.push_back(spec(n("attn_q_a.weight"), {e, ql}));
        out.push_back(spec(n("attn_q_a_norm.weight"), {ql}, true));
        out.push_back(spec(n("attn_q_b.weight"), {ql, q}));
      } else {
        out.push_back(spec(n("attn_q.weight"), {e, q}));
      }
      out.push_back(spec(n("attn_kv_a_mqa.weight"), {e, kl + r}));
      out.push_back(spec(n("attn_kv_a_norm.weight"), {kl}, true));
      out.push_back(spec(n("attn_kv_b.weight"), {kl, int64_t{c.n_head} * (c.qk_nope_dim + c.v_head_dim)}));
    } else {
      out.push_back(spec(n("attn_q.weight"), {e, q}));
      out.push_back(spec(n("attn_k.weight"), {e, kv}));
      out.push_back(spec(n("attn_v.weight"), {e, kv}));
    }
    if (c.qkv_bias) {
      out.push_back(spec(n("attn_q.bias"), {q}));
      out.push_back(spec(n("attn_k.bias"), {kv}));
      out.push_back(spec(n("attn_v.bias"), {kv}));
    }
    if (c.qk_norm) {
      out.push_back(spec(n("attn_q_norm.weight"), {hd}, true));
      out.push_back(spec(n("attn_k_norm.weight"), {hd}, true));
    }
    out.push_back(spec(n("attn_output.weight"), {int64_t{c.attn_out_dim()}, e}));
    out.push_back(spec(n("ffn_norm.weight"), {e}, true));
    if (c.is_moe_layer(l)) {
      const int64_t ne = c.n_expert, fe = c.n_ff_exp, sh = c.n_ff_shexp;
      out.push_back(spec(n("ffn_gate_inp.weight"), {e, ne}));
      out.push_back(spec(n("ffn_gate_exps.weight"), {e, fe, ne}));
      out.push_back(spec(n("ffn_up_exps.weight"), {e, fe, ne}));
      out.push_back(spec(n("ffn_down_exps.weight"), {fe, e, ne}));
      if (sh > 0) {
        if (c.arch != Arch::kDeepseek2) out.push_back(spec(n("ffn_gate_inp_shexp.weight"), {e}));  // Qwen2-MoE
        out.push_back(spec(n("ffn_gate_shexp.weight"), {e, sh}));
        out.push_back(spec(n("ffn_up_shexp.weight"), {e, sh}));
        out.push_back(spec(n("ffn_down_shexp.weight"), {sh, e}));
      }
      continue;
    }
    out.push_back(spec(n("ffn_gate.weight"), {e, ff}));
    out.push_back(spec(n("ffn_up.weight"), {e, ff}));
    out.push_back(spec(n("ffn_down.weight"), {ff, e}));
  }
  out.push_back(spec("output_norm.weight", {e}, true));
  if (!c.tied_embeddings) out.push_back(spec("output.weight", {e, v}));
  return out;
}

Status validate_config(const ModelConfig& c) {
  // Upper bounds keep every derived product (q_dim, n_embd*n_vocab, ...) far from int64 overflow
  // and reject garbage headers; they are far above any real model.
  constexpr int kMaxDim = 1 << 20, kMaxLayers = 4096, kMaxHeads = 4096, kMaxVocab = 1 << 24;
  auto range = [](const char* field, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) return error("%s is %lld, expected %lld..%lld", field, static_cast<long long>(v),
                                       static_cast<long long>(lo), static_cast<long long>(hi));
    return Status::ok();
  };
  MOPT_TRY(range("vocab size", c.n_vocab, 1, kMaxVocab));
  MOPT_TRY(range("hidden size (n_embd)", c.n_embd, 1, kMaxDim));
  MOPT_TRY(range("layer count", c.n_layer, 1, kMaxLayers));
  MOPT_TRY(range("attention head count", c.n_head, 1, kMaxHeads));
  MOPT_TRY(range("KV head count", c.n_head_kv, 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    return error("attention head count %d is not a multiple of the KV head count %d", c.n_head, c.n_head_kv);
  MOPT_TRY(range("head_dim", c.head_dim, 1, kMaxDim));
  if (static_cast<int64_t>(c.n_head) * c.head_dim > kMaxDim)
    return error("n_head * head_dim = %lld is too large", static_cast<long long>(c.n_head) * c.head_dim);
  MOPT_TRY(range("feed-forward size (n_ff)", c.n_ff, 1, 8 * kMaxDim));
  MOPT_TRY(range("context length", c.context_length, 1, 1 << 28));
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    return error("rope dimension count is %d, expected an even number in 2..head_dim (%d)", c.rope_dim, c.head_dim);
  if (!(c.norm_eps > 0.0f) || !std::isfinite(c.norm_eps) || c.norm_eps > 1.0f)
    return error("RMSNorm epsilon %g is not in (0, 1]", static_cast<double>(c.norm_eps));
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    return error("rope theta %g is not a positive number", static_cast<double>(c.rope_theta));
  if (c.rope_scaling != RopeScaling::kNone && (!(c.rope_scale_factor > 0.0f) || !std::isfinite(c.rope_scale_factor)))
    return error("rope scaling factor %g is not a positive number", static_cast<double>(c.rope_scale_factor));
  if (c.rope_scaling == RopeScaling::kLlama3) {
    if (!(c.rope_low_freq_factor > 0.0f) || !(c.rope_high_freq_factor > c.rope_low_freq_factor))
      return error("llama3 rope scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
                   static_cast<double>(c.rope_low_freq_factor), static_cast<double>(c.rope_high_freq_factor));
    MOPT_TRY(range("llama3 original_max_position_embeddings", c.rope_original_context, 1, 1 << 28));
  }
  MOPT_TRY(range("sliding window", c.sliding_window, 0, 1 << 28));
  const bool moe_arch = c.arch == Arch::kMixtral || c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe ||
                        c.arch == Arch::kDeepseek2;
  if (moe_arch && !c.is_moe())
    return error("%s is a mixture-of-experts architecture but the config gives no expert count", arch_name(c.arch));
  if (c.is_moe()) {
    constexpr int kMaxExperts = 1024;
    MOPT_TRY(range("expert count", c.n_expert, 1, kMaxExperts));
    MOPT_TRY(range("experts used per token", c.n_expert_used, 1, c.n_expert));
    MOPT_TRY(range("expert feed-forward size", c.n_ff_exp, 1, 8 * kMaxDim));
    MOPT_TRY(range("shared expert feed-forward size", c.n_ff_shexp, 0, 8 * kMaxDim));
    // Every expert of a layer at once must stay addressable: n_expert * n_ff_exp * n_embd elements.
    if (static_cast<int64_t>(c.n_expert) * c.n_ff_exp * c.n_embd > (int64_t{1} << 40))
      return error("%d experts of %d x %d are too large", c.n_expert, c.n_ff_exp, c.n_embd);
    MOPT_TRY(range("dense leading layers", c.n_layer_dense_lead, 0, c.n_layer));
    if (!(c.expert_weights_scale > 0.0f) || !std::isfinite(c.expert_weights_scale))
      return error("routed_scaling_factor %g is not a positive number", static_cast<double>(c.expert_weights_scale));
    if (c.n_expert_groups > 0) {
      MOPT_TRY(range("expert groups (n_group)", c.n_expert_groups, 1, std::min(64, c.n_expert)));
      if (c.n_expert % c.n_expert_groups != 0)
        return error("%d experts do not split into %d groups", c.n_expert, c.n_expert_groups);
      MOPT_TRY(range("groups used (topk_group)", c.n_group_used, 1, c.n_expert_groups));
      if (c.n_group_used * (c.n_expert / c.n_expert_groups) < c.n_expert_used)
        return error("topk_group %d groups of %d experts hold fewer than num_experts_per_tok %d", c.n_group_used,
                     c.n_expert / c.n_expert_groups, c.n_expert_used);
    }
  } else if (c.n_expert_used != 0 || c.n_ff_exp != 0 || c.n_ff_shexp != 0) {
    return error("experts used per token / expert sizes are set but the expert count is 0");
  }
  if (c.is_mla()) {
    MOPT_TRY(range("kv_lora_rank", c.kv_lora_rank, 1, kMaxDim));
    MOPT_TRY(range("q_lora_rank", c.q_lora_rank, 0, kMaxDim));
    MOPT_TRY(range("qk_nope_head_dim", c.qk_nope_dim, 1, kMaxDim));
    MOPT_TRY(range("v_head_dim", c.v_head_dim, 1, c.head_dim));
    if (c.head_dim != c.qk_nope_dim + c.rope_dim || c.n_head_kv != c.n_head)
      return error("multi-head latent attention needs head_dim = qk_nope_head_dim + qk_rope_head_dim (%d + %d, is "
                   "%d) and one KV head per head", c.qk_nope_dim, c.rope_dim, c.head_dim);
  }
  if (c.rope_scaling == RopeScaling::kYarn) {
    MOPT_TRY(range("yarn original_max_position_embeddings", c.rope_original_context, 1, 1 << 28));
    if (!(c.rope_yarn_beta_fast > 0.0f) || !(c.rope_yarn_beta_slow > 0.0f) || !(c.rope_attn_factor > 0.0f))
      return error("yarn beta_fast %g, beta_slow %g and attention factor %g must be positive",
                   static_cast<double>(c.rope_yarn_beta_fast), static_cast<double>(c.rope_yarn_beta_slow),
                   static_cast<double>(c.rope_attn_factor));
  }
  return Status::ok();
}

}  // namespace mopt
