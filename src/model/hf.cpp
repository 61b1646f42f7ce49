// Hugging Face folder loading: config.json (old and transformers-5 keys), safetensors weights under
// canonical names, tokenizer (tokenizer engineer's vocab_from_hf_dir), chat template.
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "core/strfmt.h"
#include "model/arch.h"
#include "model/hf_experts.h"
#include "model/hf_quant.h"
#include "model/json_file.h"
#include "model/loaders.h"
#include "model/safetensors.h"
#include "model/vocab_load.h"

namespace mopt {

namespace {

using json = nlohmann::json;

// Field readers: absent or null -> default; present with the wrong type or range -> error naming the key.
Status get_int(const json& j, const char* key, int& out, int def, int lo = 1, int hi = INT_MAX) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def == INT_MIN) return error("missing \"%s\"", key);
    out = def;
    return Status::ok();
  }
  if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
    return error("\"%s\" is %s, expected an integer", key, it->dump().c_str());
  double v = it->get<double>();
  if (v < lo || v > hi) return error("\"%s\" = %s is out of range (%d..%d)", key, it->dump().c_str(), lo, hi);
  out = static_cast<int>(v);
  return Status::ok();
}

// Absent or null: `out` keeps its value; `is` tells whether the value has the type, `expected` names it.
template <class T>
Status get_field(const json& j, const char* key, T& out, bool (json::*is)() const noexcept, const char* expected) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();
  if (!((*it).*is)()) return error("\"%s\" is %s, expected %s", key, it->dump().c_str(), expected);
  out = it->get<T>();
  return Status::ok();
}
Status get_real(const json& j, const char* key, float& out) {
  return get_field(j, key, out, &json::is_number, "a number");
}
Status get_bool(const json& j, const char* key, bool& out) {
  return get_field(j, key, out, &json::is_boolean, "true or false");
}
Status get_str(const json& j, const char* key, std::string& out) {
  return get_field(j, key, out, &json::is_string, "a string");
}

// rope_scaling (old) / rope_parameters (transformers 5): {rope_type|type, factor, low_freq_factor, ...}.
Status parse_rope(const json& r, const char* where, ModelConfig& c) {
  if (!r.is_object()) return error("\"%s\" is %s, expected an object", where, r.dump().c_str());
  MOPT_TRY(get_real(r, "rope_theta", c.rope_theta));
  std::string type = "default";
  MOPT_TRY(get_str(r, "type", type));
  MOPT_TRY(get_str(r, "rope_type", type));
  if (type == "default") {
    c.rope_scaling = RopeScaling::kNone;
  } else if (type == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
    MOPT_TRY(get_real(r, "factor", c.rope_scale_factor));
  } else if (type == "llama3") {
    c.rope_scaling = RopeScaling::kLlama3;
    MOPT_TRY(get_real(r, "factor", c.rope_scale_factor));
    MOPT_TRY(get_real(r, "low_freq_factor", c.rope_low_freq_factor));
    MOPT_TRY(get_real(r, "high_freq_factor", c.rope_high_freq_factor));
    MOPT_TRY(get_int(r, "original_max_position_embeddings", c.rope_original_context, c.rope_original_context));
  } else if (type == "yarn") {  // transformers' _compute_yarn_parameters
    if (c.arch != Arch::kDeepseek2)  // the runners apply its attention factor in DeepSeek-V2's attention only
      return error("%s rope type \"yarn\" is not supported for %s (only for DeepSeek-V2)", where, arch_name(c.arch));
    c.rope_scaling = RopeScaling::kYarn;
    MOPT_TRY(get_real(r, "factor", c.rope_scale_factor));
    MOPT_TRY(get_int(r, "original_max_position_embeddings", c.rope_original_context, INT_MIN));
    MOPT_TRY(get_real(r, "beta_fast", c.rope_yarn_beta_fast));
    MOPT_TRY(get_real(r, "beta_slow", c.rope_yarn_beta_slow));
    MOPT_TRY(get_bool(r, "truncate", c.rope_yarn_truncate));
    float mscale = 0, mscale_all_dim = 0, attn = 0;
    MOPT_TRY(get_real(r, "mscale", mscale));
    MOPT_TRY(get_real(r, "mscale_all_dim", mscale_all_dim));
    MOPT_TRY(get_real(r, "attention_factor", attn));
    auto get_mscale = [&](double m) {
      return c.rope_scale_factor <= 1 ? 1.0 : 0.1 * m * std::log(c.rope_scale_factor) + 1.0;
    };
    if (attn > 0)
      c.rope_attn_factor = attn;
    else if (mscale != 0 && mscale_all_dim != 0)
      c.rope_attn_factor = static_cast<float>(get_mscale(mscale) / get_mscale(mscale_all_dim));
    else
      c.rope_attn_factor = static_cast<float>(get_mscale(1.0));
    if (mscale_all_dim != 0) {
      const double m = get_mscale(mscale_all_dim);
      c.attn_scale_mult = static_cast<float>(m * m);
    }
  } else {
    return error("%s rope type \"%s\" is not supported (supported: default, linear, llama3, yarn)", where,
                 type.c_str());
  }
  return Status::ok();
}

// DeepSeek-V2 (DeepseekV2Config): multi-head latent attention and DeepSeekMoE routing. Every layer from
// first_k_dense_replace on is a MoE layer (transformers ignores moe_layer_freq; only 1 is accepted).
Status fill_deepseek2(const json& j, ModelConfig& c) {
  int q_lora = 0, rope = 0, n_shared = 0, freq = 1;
  MOPT_TRY(get_int(j, "q_lora_rank", q_lora, 0, 0));
  c.q_lora_rank = q_lora;
  MOPT_TRY(get_int(j, "kv_lora_rank", c.kv_lora_rank, 512));
  MOPT_TRY(get_int(j, "qk_nope_head_dim", c.qk_nope_dim, 128));
  MOPT_TRY(get_int(j, "qk_rope_head_dim", rope, 64));
  MOPT_TRY(get_int(j, "v_head_dim", c.v_head_dim, 128));
  c.head_dim = c.qk_nope_dim + rope;
  c.rope_dim = rope;
  c.n_head_kv = c.n_head;  // K and V per head once kv_b_proj has expanded the latent
  if (c.qkv_bias) return error("\"attention_bias\": true is not supported for DeepSeek-V2");
  MOPT_TRY(get_int(j, "n_routed_experts", c.n_expert, 64));
  MOPT_TRY(get_int(j, "num_experts_per_tok", c.n_expert_used, INT_MIN));
  MOPT_TRY(get_int(j, "moe_intermediate_size", c.n_ff_exp, 1407));
  MOPT_TRY(get_int(j, "n_shared_experts", n_shared, INT_MIN, 1));
  c.n_ff_shexp = n_shared * c.n_ff_exp;
  MOPT_TRY(get_int(j, "first_k_dense_replace", c.n_layer_dense_lead, 0, 0));
  MOPT_TRY(get_int(j, "moe_layer_freq", freq, 1));
  if (freq != 1) return error("\"moe_layer_freq\": %d is not supported (only 1)", freq);
  MOPT_TRY(get_real(j, "routed_scaling_factor", c.expert_weights_scale));
  bool norm_topk = false;
  MOPT_TRY(get_bool(j, "norm_topk_prob", norm_topk));
  if (norm_topk)  // DeepSeek's code normalizes instead of scaling; transformers' DeepseekV2Moe never normalizes
    return error("\"norm_topk_prob\": true is not supported for DeepSeek-V2 (DeepSeek's code and transformers "
                 "disagree on it; the released V2 models have false)");
  std::string method = "greedy", scoring = "softmax";
  MOPT_TRY(get_str(j, "topk_method", method));
  MOPT_TRY(get_str(j, "scoring_func", scoring));
  if (scoring != "softmax") return error("\"scoring_func\" \"%s\" is not supported (only softmax)", scoring.c_str());
  if (method == "group_limited_greedy") {
    MOPT_TRY(get_int(j, "n_group", c.n_expert_groups, INT_MIN));
    MOPT_TRY(get_int(j, "topk_group", c.n_group_used, INT_MIN));
  } else if (method != "greedy") {
    return error("\"topk_method\" \"%s\" is not supported (greedy, group_limited_greedy)", method.c_str());
  }
  return Status::ok();
}

// Expert counts and sizes of Mixtral (num_local_experts, intermediate_size) and Qwen2/3-MoE (num_experts,
// moe_intermediate_size, norm_topk_prob, Qwen2-MoE's shared_expert_intermediate_size).
Status fill_moe(const json& j, ModelConfig& c) {
  if (c.arch == Arch::kDeepseek2) return fill_deepseek2(j, c);
  if (c.arch == Arch::kMixtral) {
    MOPT_TRY(get_int(j, "num_local_experts", c.n_expert, INT_MIN));
    MOPT_TRY(get_int(j, "num_experts_per_tok", c.n_expert_used, 2));
    c.n_ff_exp = c.n_ff;
    c.expert_norm_topk = true;  // transformers' Mixtral always renormalizes the top-k weights
    return Status::ok();
  }
  if (c.arch != Arch::kQwen2Moe && c.arch != Arch::kQwen3Moe) return Status::ok();
  MOPT_TRY(get_int(j, "num_experts", c.n_expert, INT_MIN));
  MOPT_TRY(get_int(j, "num_experts_per_tok", c.n_expert_used, INT_MIN));
  MOPT_TRY(get_int(j, "moe_intermediate_size", c.n_ff_exp, INT_MIN));
  c.expert_norm_topk = false;  // both configs' default
  MOPT_TRY(get_bool(j, "norm_topk_prob", c.expert_norm_topk));
  if (c.arch == Arch::kQwen2Moe) MOPT_TRY(get_int(j, "shared_expert_intermediate_size", c.n_ff_shexp, INT_MIN));
  int step = 1;
  MOPT_TRY(get_int(j, "decoder_sparse_step", step, 1));
  if (step != 1)
    return error("\"decoder_sparse_step\": %d is not supported (only 1: every layer a mixture-of-experts layer)", step);
  auto dense = j.find("mlp_only_layers");
  if (dense != j.end() && !dense->is_null() && !(dense->is_array() && dense->empty()))
    return error("\"mlp_only_layers\" %s is not supported (only []: every layer a mixture-of-experts layer)",
                 dense->dump().c_str());
  return Status::ok();
}

Status fill_config(const json& j, ModelConfig& c) {
  std::string cls;
  auto archs = j.find("architectures");
  if (archs != j.end() && !archs->is_null()) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      return error("\"architectures\" must be a non-empty list of class names");
    cls = (*archs)[0].get<std::string>();
  } else {
    MOPT_TRY(get_str(j, "model_type", cls));
    if (cls.empty()) return error("neither \"architectures\" nor \"model_type\" says what the model is");
  }
  if (std::optional<std::string> why = unsupported_arch_reason(cls)) return error("%s", why->c_str());
  std::optional<Arch> arch = arch_from_hf(cls);
  if (!arch) return error("architecture \"%s\" is not supported (supported: %s)", cls.c_str(),
                          supported_arch_list(true).c_str());
  const ArchInfo& info = arch_info(*arch);
  c.arch = *arch;
  MOPT_TRY(get_int(j, "vocab_size", c.n_vocab, INT_MIN));
  MOPT_TRY(get_int(j, "hidden_size", c.n_embd, INT_MIN));
  // Mixtral's experts are intermediate_size wide; Qwen-MoE checkpoints may leave the dense size out.
  MOPT_TRY(get_int(j, "intermediate_size", c.n_ff, *arch == Arch::kQwen2Moe || *arch == Arch::kQwen3Moe ? 1 : INT_MIN));
  MOPT_TRY(get_int(j, "num_hidden_layers", c.n_layer, INT_MIN));
  MOPT_TRY(get_int(j, "num_attention_heads", c.n_head, INT_MIN));
  MOPT_TRY(get_int(j, "num_key_value_heads", c.n_head_kv, c.n_head));
  MOPT_TRY(get_int(j, "head_dim", c.head_dim, c.n_embd / c.n_head > 0 ? c.n_embd / c.n_head : 1));
  MOPT_TRY(get_int(j, "max_position_embeddings", c.context_length, 2048));
  c.norm_eps = 1e-6f;
  MOPT_TRY(get_real(j, "rms_norm_eps", c.norm_eps));
  c.rope_theta = 10000.0f;
  MOPT_TRY(get_real(j, "rope_theta", c.rope_theta));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) MOPT_TRY(parse_rope(*it, key, c));
  }
  c.rope_dim = c.head_dim;
  float partial = 1.0f;
  MOPT_TRY(get_real(j, "partial_rotary_factor", partial));
  if (partial != 1.0f) return error("\"partial_rotary_factor\" %g is not supported (only 1.0)", double(partial));
  // HF checkpoints use rotate_half; transformers' DeepSeek-V2 rotates interleaved pairs (view_as_complex).
  c.rope_style = c.arch == Arch::kDeepseek2 ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  c.tied_embeddings = false;
  MOPT_TRY(get_bool(j, "tie_word_embeddings", c.tied_embeddings));
  c.qkv_bias = info.qkv_bias;
  bool attn_bias = false;
  MOPT_TRY(get_bool(j, "attention_bias", attn_bias));
  c.qkv_bias = c.qkv_bias || attn_bias;
  if (c.arch == Arch::kQwen2Moe) MOPT_TRY(get_bool(j, "qkv_bias", c.qkv_bias));  // transformers 5 spelling
  MOPT_TRY(fill_moe(j, c));
  c.qk_norm = info.qk_norm;
  bool mlp_bias = false;
  MOPT_TRY(get_bool(j, "mlp_bias", mlp_bias));
  if (mlp_bias) return error("\"mlp_bias\": true is not supported");
  std::string act = "silu";
  MOPT_TRY(get_str(j, "hidden_act", act));
  if (act != "silu") return error("\"hidden_act\" \"%s\" is not supported (only silu)", act.c_str());
  // Sliding window: Mistral uses "sliding_window" directly; Qwen2/3 only when "use_sliding_window" is true.
  bool use_sliding = c.arch == Arch::kMistral;
  MOPT_TRY(get_bool(j, "use_sliding_window", use_sliding));
  int window = 0;
  MOPT_TRY(get_int(j, "sliding_window", window, 0, 0));
  c.sliding_window = use_sliding ? window : 0;
  // Weight dtype: validated so a typo is caught, not used (the tensors carry their own dtypes).
  std::string dtype;
  MOPT_TRY(get_str(j, "torch_dtype", dtype));
  MOPT_TRY(get_str(j, "dtype", dtype));
  auto is_torch_weight = [](const DTypeTraits& r) { return r.weight && r.torch_name; };
  bool known = dtype.empty();
  for (const DTypeTraits& r : dtype_table()) known = known || (is_torch_weight(r) && dtype == r.torch_name);
  if (!known)
    return error("\"dtype\" \"%s\" is not supported (%s)", dtype.c_str(),
                 dtype_list(is_torch_weight, [](const DTypeTraits& r) { return r.torch_name; }).c_str());
  return Status::ok();
}

bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string base_name(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.find_last_of('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

}  // namespace

Result<ModelConfig> parse_hf_config(const std::string& text, const std::string& name) {
  MOPT_ASSIGN_OR_RETURN(const json j, parse_json_object(text, name));
  ModelConfig c;
  try {
    Status s = fill_config(j, c);
    if (!s.is_ok()) return s.with_context(name);
  } catch (const json::exception& e) {
    return error("%s: unexpected value: %s", name.c_str(), e.what());
  }
  Status v = validate_config(c);
  if (!v.is_ok()) return v.with_context(name);
  return c;
}

Result<std::string> hf_chat_template(const std::string& dir) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (is_regular_file(jinja)) return read_file(jinja);
  const std::string tc = dir + "/tokenizer_config.json";
  if (!is_regular_file(tc)) return std::string();
  MOPT_ASSIGN_OR_RETURN(std::string text, read_file(tc));
  MOPT_ASSIGN_OR_RETURN(const json j, parse_json_object(text, tc));
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& e : *it) {
      if (e.is_object() && e.value("name", json()).is_string() && e["name"].get<std::string>() == "default") {
        if (!e.contains("template") || !e["template"].is_string())
          return error("%s: chat_template \"default\" has no string \"template\"", tc.c_str());
        return e["template"].get<std::string>();
      }
    }
    return error("%s: chat_template is a list without a \"default\" entry", tc.c_str());
  }
  return error("%s: chat_template must be a string or a list of {name, template}", tc.c_str());
}

Result<std::unique_ptr<Model>> load_hf_model(const std::string& dir, const LoadOptions& opts) {
  const std::string cfg_path = dir + "/config.json";
  if (!is_regular_file(cfg_path))
    return error("%s: no config.json in this folder (expected a Hugging Face model folder)", dir.c_str());
  MOPT_ASSIGN_OR_RETURN(std::string cfg_text, read_file(cfg_path));
  MOPT_ASSIGN_OR_RETURN(ModelConfig config, parse_hf_config(cfg_text, cfg_path));
  config.name = base_name(dir);
  auto m = std::make_unique<Model>();
  m->format = ModelFormat::kHuggingFace;
  m->path = dir;
  m->config = config;
  MOPT_ASSIGN_OR_RETURN(const json cfg_json, parse_json_object(cfg_text, cfg_path));
  Result<HfQuantConfig> quant = parse_hf_quant_config(cfg_json);
  if (!quant) return quant.status().with_context(cfg_path);
  MOPT_ASSIGN_OR_RETURN(safetensors::TensorSet set, safetensors::open_dir(dir));
  for (auto& mp : set.mappings) m->mappings.push_back(std::move(mp));
  MOPT_TRY(assemble_hf_quant(*quant, set.tensors, m->owned_buffers).with_context(dir));
  MOPT_TRY(assemble_hf_experts(config, set.tensors, m->owned_buffers).with_context(dir));
  for (TensorView& t : set.tensors) {
    if (hf_ignorable_tensor(t.name)) continue;
    std::optional<std::string> canon = hf_to_canonical_name(t.name);
    if (!canon) {
      // Kept under its own name: visible in `mopt inspect`, unused by the forward pass.
      m->tensors.push_back(std::move(t));
      continue;
    }
    if (!dtype_traits(t.dtype).weight)
      return error("%s: tensor %s is %s, which is no weight type; quantized checkpoints need a quantization_config in "
                   "config.json that describes their layout", dir.c_str(), t.name.c_str(), dtype_name(t.dtype));
    if (*canon == "output.weight" && config.tied_embeddings) continue;  // tied: the model reuses token_embd
    t.name = std::move(*canon);
    m->tensors.push_back(std::move(t));
  }
  Status s = finalize_model(*m);  // weights first: the structural check is cheap and names the tensor
  if (!s.is_ok()) return s.with_context(dir);
  MOPT_ASSIGN_OR_RETURN(std::string tmpl, hf_chat_template(dir));
  m->chat_template = std::move(tmpl);
  Result<VocabData> vocab = vocab_from_hf_dir(dir);
  if (!vocab) return vocab.status().with_context(strfmt("%s: reading the tokenizer", dir.c_str()));
  m->vocab = std::move(*vocab);
  if (m->vocab.tokens.size() > static_cast<size_t>(config.n_vocab))
    return error("%s: the tokenizer has %zu tokens but vocab_size is %d", dir.c_str(), m->vocab.tokens.size(),
                 config.n_vocab);
  (void)opts;
  return m;
}

}  // namespace mopt
