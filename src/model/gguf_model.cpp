// GGUF model loading: config from `<arch>.*` metadata, zero-copy tensor views, vocab, chat template.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/strfmt.h"
#include "model/arch.h"
#include "model/loaders.h"
#include "model/vocab_load.h"

namespace mopt {

namespace {

// Reads an integer hyperparameter `<arch>.<key>` into `out` (1..INT_MAX); missing -> `def` (or an error if def < 0).
Status get_dim(const gguf::File& f, const std::string& arch, const char* key, int& out, int def) {
  const std::string full = arch + "." + key;
  const gguf::Value* v = f.find(full);
  if (!v) {
    if (def < 0) return error("missing metadata %s (needed to build the %s model)", full.c_str(), arch.c_str());
    out = def;
    return Status::ok();
  }
  if (!v->is_int()) {
    // Some converters store per-layer arrays (e.g. head_count_kv per layer); take a uniform one.
    if (v->type == gguf::ValueType::kArray && !v->arr.empty() && v->arr[0].is_int()) {
      int64_t first = v->arr[0].as_int();
      for (const auto& e : v->arr)
        if (!e.is_int() || e.as_int() != first)
          return error("metadata %s varies per layer, which is not supported", full.c_str());
      if (first < 1 || first > INT_MAX) return error("metadata %s = %lld is out of range", full.c_str(), (long long)first);
      out = static_cast<int>(first);
      return Status::ok();
    }
    return error("metadata %s is %s, expected an integer", full.c_str(), gguf::value_type_name(v->type));
  }
  int64_t x = v->as_int();
  if (x < 1 || x > INT_MAX) return error("metadata %s = %lld is out of range (1..%d)", full.c_str(), (long long)x, INT_MAX);
  out = static_cast<int>(x);
  return Status::ok();
}

Status get_real(const gguf::File& f, const std::string& key, float& out) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::ok();  // keep the default
  std::optional<double> d = f.get_float(key);
  if (!d) return error("metadata %s is %s, expected a number", key.c_str(), gguf::value_type_name(v->type));
  out = static_cast<float>(*d);
  return Status::ok();
}

std::string file_stem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// Llama 3.1-style GGUF files carry no rope-scaling metadata: llama.cpp's converter stores the per-dimension
// divisors of the RoPE frequencies as rope_freqs.weight [rope_dim/2]. We recover the llama3 parameters:
// factor = the largest divisor; low/high_freq_factor and the original context are the published Llama 3.1
// values (1, 4, 8192, or the file's rope.scaling.original_context_length), accepted only if recomputing the
// divisors from them reproduces the tensor.
Status rope_from_freq_factors(const gguf::File& f, const std::string& arch, ModelConfig& c) {
  const gguf::TensorInfo* t = f.find_tensor("rope_freqs.weight");
  if (!t) return Status::ok();
  const int64_t n = c.rope_dim / 2;
  if (t->view.dtype != DType::F32 || t->view.n_dims != 1 || t->view.ne[0] != n)
    return error("rope_freqs.weight is %s %s, expected f32 [%lld] (rope_dim / 2)", dtype_name(t->view.dtype),
                 t->view.shape_str().c_str(), static_cast<long long>(n));
  std::vector<float> div(static_cast<size_t>(n));
  std::memcpy(div.data(), t->view.data, div.size() * 4);
  float factor = 1.0f;
  for (float d : div) {
    if (!(d >= 1.0f) || !std::isfinite(d))
      return error("rope_freqs.weight holds %g; llama3 frequency divisors are >= 1", static_cast<double>(d));
    factor = std::max(factor, d);
  }
  if (factor == 1.0f) return Status::ok();  // no scaling
  int orig = 8192;
  MOPT_TRY(get_dim(f, arch, "rope.scaling.original_context_length", orig, 8192));
  const double low = 1.0, high = 4.0;
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  for (int64_t i = 0; i < n; ++i) {
    const double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / c.rope_dim);
    const double wavelen = 2.0 * M_PI / freq;
    double want;
    if (wavelen < high_wavelen) {
      want = 1.0;
    } else if (wavelen > low_wavelen) {
      want = factor;
    } else {
      const double smooth = (orig / wavelen - low) / (high - low);
      want = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    if (std::fabs(want - div[static_cast<size_t>(i)]) > 1e-3 * want)
      return error("rope_freqs.weight[%lld] = %g does not match llama3 RoPE scaling (factor %g, low_freq_factor 1, "
                   "high_freq_factor 4, original context %d gives %g); other per-dimension RoPE factors are not "
                   "supported", static_cast<long long>(i), static_cast<double>(div[static_cast<size_t>(i)]),
                   static_cast<double>(factor), orig, want);
  }
  c.rope_scaling = RopeScaling::kLlama3;
  c.rope_scale_factor = factor;
  c.rope_low_freq_factor = static_cast<float>(low);
  c.rope_high_freq_factor = static_cast<float>(high);
  c.rope_original_context = orig;
  return Status::ok();
}

}  // namespace

Result<ModelConfig> config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  std::optional<std::string> arch_s = f.get_string("general.architecture");
  if (!arch_s) return error("missing metadata general.architecture (a string)");
  if (std::optional<std::string> why = unsupported_arch_reason(*arch_s)) return error("%s", why->c_str());
  std::optional<Arch> arch = arch_from_gguf(*arch_s);
  if (arch == Arch::kLlama && f.find(*arch_s + ".expert_count")) arch = Arch::kMixtral;  // llama.cpp's Mixtral
  if (!arch)
    return error("architecture '%s' is not supported (supported: %s)", arch_s->c_str(),
                 supported_arch_list(false).c_str());
  const ArchInfo& info = arch_info(*arch);
  const std::string& a = *arch_s;
  c.arch = *arch;
  c.name = f.get_string("general.name").value_or(file_stem(f.path()));
  MOPT_TRY(get_dim(f, a, "embedding_length", c.n_embd, -1));
  MOPT_TRY(get_dim(f, a, "block_count", c.n_layer, -1));
  MOPT_TRY(get_dim(f, a, "feed_forward_length", c.n_ff, *arch == Arch::kQwen2Moe || *arch == Arch::kQwen3Moe ? 1 : -1));
  MOPT_TRY(get_dim(f, a, "attention.head_count", c.n_head, -1));
  MOPT_TRY(get_dim(f, a, "attention.head_count_kv", c.n_head_kv, c.n_head));
  MOPT_TRY(get_dim(f, a, "context_length", c.context_length, 2048));
  MOPT_TRY(get_dim(f, a, "attention.key_length", c.head_dim, c.n_embd / c.n_head > 0 ? c.n_embd / c.n_head : 1));
  int value_length = c.head_dim;
  MOPT_TRY(get_dim(f, a, "attention.value_length", value_length, c.head_dim));
  if (value_length != c.head_dim)
    return error("%s.attention.value_length (%d) differs from key_length (%d), which is not supported", a.c_str(),
                 value_length, c.head_dim);
  MOPT_TRY(get_dim(f, a, "rope.dimension_count", c.rope_dim, c.head_dim));
  MOPT_TRY(get_real(f, a + ".rope.freq_base", c.rope_theta));
  MOPT_TRY(get_real(f, a + ".attention.layer_norm_rms_epsilon", c.norm_eps));
  int sliding = 0;
  if (f.find(a + ".attention.sliding_window")) MOPT_TRY(get_dim(f, a, "attention.sliding_window", sliding, 0));
  c.sliding_window = sliding;

  // RoPE scaling: rope.scaling.type (+ factor, original_context_length), or the older rope.scale_linear.
  std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("none");
  if (f.find(a + ".rope.scale_linear") && scaling == "none") scaling = "linear";
  if (scaling == "linear") {
    c.rope_scaling = RopeScaling::kLinear;
    c.rope_scale_factor = 1.0f;
    MOPT_TRY(get_real(f, a + ".rope.scale_linear", c.rope_scale_factor));
    MOPT_TRY(get_real(f, a + ".rope.scaling.factor", c.rope_scale_factor));
  } else if (scaling != "none") {
    return error("%s.rope.scaling.type '%s' is not supported (supported: none, linear)", a.c_str(), scaling.c_str());
  }
  if (c.rope_scaling == RopeScaling::kNone && c.rope_dim % 2 == 0 && c.rope_dim > 0)
    MOPT_TRY(rope_from_freq_factors(f, a, c));
  if (c.arch == Arch::kMixtral || c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    // llama.cpp: expert_count, expert_used_count, expert_feed_forward_length (Qwen-MoE; Mixtral's experts are
    // feed_forward_length wide), expert_shared_feed_forward_length (Qwen2-MoE). llama.cpp renormalizes the top-k
    // weights of Mixtral and Qwen3-MoE and not those of Qwen2-MoE, as their Hugging Face configs do.
    MOPT_TRY(get_dim(f, a, "expert_count", c.n_expert, -1));
    MOPT_TRY(get_dim(f, a, "expert_used_count", c.n_expert_used, -1));
    MOPT_TRY(get_dim(f, a, "expert_feed_forward_length", c.n_ff_exp, c.arch == Arch::kMixtral ? c.n_ff : -1));
    if (c.arch == Arch::kQwen2Moe) MOPT_TRY(get_dim(f, a, "expert_shared_feed_forward_length", c.n_ff_shexp, -1));
    c.expert_norm_topk = c.arch != Arch::kQwen2Moe;
  }
  c.rope_style = info.gguf_rope;
  c.qkv_bias = info.qkv_bias || f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = info.qk_norm;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  if (const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight")) {
    if (emb->view.n_dims != 2) return error("token_embd.weight has shape %s, expected 2 dimensions",
                                            emb->view.shape_str().c_str());
    if (emb->view.ne[1] > INT_MAX) return error("token_embd.weight vocab dimension is too large");
    c.n_vocab = static_cast<int>(emb->view.ne[1]);
  } else if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
             toks && toks->type == gguf::ValueType::kArray && toks->arr.size() <= INT_MAX) {
    c.n_vocab = static_cast<int>(toks->arr.size());
  } else {
    MOPT_TRY(get_dim(f, a, "vocab_size", c.n_vocab, -1));
  }
  return c;
}

Result<std::unique_ptr<Model>> load_gguf_model(const std::string& path, const LoadOptions& opts) {
  MOPT_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  auto m = std::make_unique<Model>();
  m->format = ModelFormat::kGGUF;
  m->path = path;
  m->vocab_only = opts.vocab_only;
  m->chat_template = file->get_string("tokenizer.chat_template").value_or("");
  if (opts.vocab_only) {
    // Vocab-only files (llama.cpp's ggml-vocab-*.gguf) may name architectures we do not run; the config is
    // filled as far as the metadata allows and not validated.
    Result<ModelConfig> c = config_from_gguf(*file);
    if (c) m->config = *c;
    m->config.name = file->get_string("general.name").value_or(file_stem(path));
  } else {
    Result<ModelConfig> c = config_from_gguf(*file);
    if (!c) return c.status().with_context(path);
    m->config = *c;
    for (const gguf::TensorInfo& t : file->tensors()) m->tensors.push_back(t.view);
  }
  Result<VocabData> vocab = vocab_from_gguf(*file);
  if (!vocab) return vocab.status().with_context(strfmt("%s: reading the tokenizer", path.c_str()));
  m->vocab = std::move(*vocab);
  if (!opts.vocab_only && m->vocab.kind != TokenizerKind::kNone && !m->vocab.tokens.empty() &&
      m->vocab.tokens.size() > static_cast<size_t>(m->config.n_vocab))
    return error("%s: the tokenizer has %zu tokens but token_embd.weight has only %d rows", path.c_str(),
                 m->vocab.tokens.size(), m->config.n_vocab);
  m->mappings.push_back(file->take_mapping());
  Status s = finalize_model(*m);
  if (!s.is_ok()) return s.with_context(path);
  return m;
}

}  // namespace mopt
