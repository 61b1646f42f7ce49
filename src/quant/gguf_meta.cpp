// GGUF metadata for models from other formats (gguf_meta.h). Keys as llama.cpp's converter writes them and
// model/gguf_model.cpp / model/vocab_load.cpp read them.
#include "quant/gguf_meta.h"

#include "backend/rope.h"
#include "core/strfmt.h"
#include "model/arch.h"

namespace mopt::quant {

namespace {

const char* tokenizer_model(TokenizerKind k) {
  switch (k) {
    case TokenizerKind::kSpm: return "llama";
    case TokenizerKind::kBpe: return "gpt2";
    case TokenizerKind::kWordPiece: return "bert";
    case TokenizerKind::kNone: return nullptr;
  }
  return nullptr;
}

Status tokenizer_meta(const VocabData& v, const std::string& chat_template, GgufWriter& w) {
  const char* model = tokenizer_model(v.kind);
  if (!model) return Status::ok();  // no tokenizer to carry over
  if (!v.pre_regex.empty())
    return error("the tokenizer's pre-tokenizer (regexes %s...) has no GGUF name, so a GGUF file cannot describe "
                 "it; use a safetensors output (--to fp8 / int8 / awq) for this model",
                 v.pre_regex.front().substr(0, 40).c_str());
  w.set("tokenizer.ggml.model", gguf_string(model));
  w.set("tokenizer.ggml.pre", gguf_string(v.pre.empty() ? "default" : v.pre));
  w.set("tokenizer.ggml.tokens", gguf_string_array(v.tokens));
  std::vector<int32_t> types(v.types.size());
  for (size_t i = 0; i < v.types.size(); ++i) types[i] = static_cast<int32_t>(v.types[i]);
  w.set("tokenizer.ggml.token_type", gguf_i32_array(types));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", gguf_f32_array(v.scores));
  if (v.kind == TokenizerKind::kBpe) w.set("tokenizer.ggml.merges", gguf_string_array(v.merges));
  const std::pair<const char*, int32_t> ids[] = {
      {"bos", v.bos}, {"eos", v.eos}, {"unknown", v.unk}, {"seperator", v.sep}, {"padding", v.pad},
      {"cls", v.cls}, {"mask", v.mask}, {"eot", v.eot}};
  for (const auto& [key, id] : ids)
    if (id >= 0) w.set(strfmt("tokenizer.ggml.%s_token_id", key), gguf_u32(static_cast<uint32_t>(id)));
  w.set("tokenizer.ggml.add_bos_token", gguf_bool(v.add_bos));
  w.set("tokenizer.ggml.add_eos_token", gguf_bool(v.add_eos));
  if (v.kind == TokenizerKind::kSpm) w.set("tokenizer.ggml.add_space_prefix", gguf_bool(v.add_space_prefix));
  if (!chat_template.empty()) w.set("tokenizer.chat_template", gguf_string(chat_template));
  return Status::ok();
}

// llama.cpp's converter for Llama-3 RoPE scaling: per dimension pair, the divisor of its frequency (the unscaled
// frequency over the scaled one).
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  ModelConfig plain = c;
  plain.rope_scaling = RopeScaling::kNone;
  const std::vector<float> scaled = rope_inv_freq(c), base = rope_inv_freq(plain);
  std::vector<float> out(scaled.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = base[i] / scaled[i];
  return out;
}

}  // namespace

const char* gguf_arch_name(const ModelConfig& c) {
  return c.arch == Arch::kMistral ? arch_info(Arch::kLlama).gguf_name : arch_info(c.arch).gguf_name;
}

Result<std::vector<ExtraTensor>> gguf_meta_from_model(const Model& m, GgufWriter& w) {
  const ModelConfig& c = m.config;
  const std::string a = gguf_arch_name(c);
  auto key = [&](const char* k) { return a + "." + k; };
  w.set("general.architecture", gguf_string(a));
  w.set("general.name", gguf_string(c.name));
  w.set(key("vocab_size"), gguf_u32(static_cast<uint32_t>(c.n_vocab)));
  w.set(key("context_length"), gguf_u32(static_cast<uint32_t>(c.context_length)));
  w.set(key("embedding_length"), gguf_u32(static_cast<uint32_t>(c.n_embd)));
  w.set(key("block_count"), gguf_u32(static_cast<uint32_t>(c.n_layer)));
  w.set(key("feed_forward_length"), gguf_u32(static_cast<uint32_t>(c.n_ff)));
  w.set(key("attention.head_count"), gguf_u32(static_cast<uint32_t>(c.n_head)));
  w.set(key("attention.head_count_kv"), gguf_u32(static_cast<uint32_t>(c.n_head_kv)));
  if (c.head_dim != c.n_embd / c.n_head) {
    w.set(key("attention.key_length"), gguf_u32(static_cast<uint32_t>(c.head_dim)));
    w.set(key("attention.value_length"), gguf_u32(static_cast<uint32_t>(c.head_dim)));
  }
  w.set(key("rope.dimension_count"), gguf_u32(static_cast<uint32_t>(c.rope_dim)));
  w.set(key("rope.freq_base"), gguf_f32(c.rope_theta));
  w.set(key("attention.layer_norm_rms_epsilon"), gguf_f32(c.norm_eps));
  if (c.sliding_window > 0) w.set(key("attention.sliding_window"), gguf_u32(static_cast<uint32_t>(c.sliding_window)));
  std::vector<ExtraTensor> extra;
  switch (c.rope_scaling) {
    case RopeScaling::kNone: break;
    case RopeScaling::kLinear:
      w.set(key("rope.scaling.type"), gguf_string("linear"));
      w.set(key("rope.scaling.factor"), gguf_f32(c.rope_scale_factor));
      break;
    case RopeScaling::kLlama3:
      if (c.rope_low_freq_factor != 1.0f || c.rope_high_freq_factor != 4.0f)
        return error("llama3 RoPE scaling with low_freq_factor %g and high_freq_factor %g: GGUF files (and mopt's "
                     "GGUF loader) assume 1 and 4", static_cast<double>(c.rope_low_freq_factor),
                     static_cast<double>(c.rope_high_freq_factor));
      w.set(key("rope.scaling.original_context_length"), gguf_u32(static_cast<uint32_t>(c.rope_original_context)));
      extra.push_back({"rope_freqs.weight", llama3_rope_factors(c)});
      break;
    case RopeScaling::kYarn:  // DeepSeek-V2 only, a MoE model: mopt quantize refuses it before
      return error("yarn RoPE scaling (DeepSeek-V2) is not written to GGUF files");
  }
  MOPT_TRY(tokenizer_meta(m.vocab, m.chat_template, w));
  return extra;
}

std::vector<int64_t> gguf_row_order(const ModelConfig& c, RopeStyle from, const std::string& name, int64_t rows) {
  const RopeStyle to = arch_info(c.arch).gguf_rope;
  if (from == to) return {};
  const auto ends = [&](const char* s) {
    const std::string suf = s;
    return name.size() >= suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
  };
  int heads = 0;
  if (ends("attn_q.weight") || ends("attn_q.bias")) heads = c.n_head;
  if (ends("attn_k.weight") || ends("attn_k.bias")) heads = c.n_head_kv;
  if (heads == 0) return {};
  const int64_t hd = c.head_dim, half = c.rope_dim / 2;
  MOPT_CHECK(rows == heads * hd, "gguf_row_order: %s has %lld rows, expected %lld", name.c_str(),
             static_cast<long long>(rows), static_cast<long long>(heads * hd));
  std::vector<int64_t> perm(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) perm[static_cast<size_t>(r)] = r;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t inter = h * hd + 2 * i + j, neox = h * hd + j * half + i;  // the same value in each pairing
        if (to == RopeStyle::kInterleaved) {
          perm[static_cast<size_t>(inter)] = neox;
        } else {
          perm[static_cast<size_t>(neox)] = inter;
        }
      }
  return perm;
}

}  // namespace mopt::quant
