// llama2.c checkpoint loader. Layout (all little-endian):
//   int32 header[7] = {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len}
//   (vocab_size < 0: the classifier is stored separately at the end; > 0: shared with the embedding),
//   then fp32 arrays:
//   token_embedding [vocab, dim]   rms_att [L, dim]   wq [L, dim, dim]   wk [L, kv_dim, dim]   wv [L, kv_dim, dim]
//   wo [L, dim, dim]   rms_ffn [L, dim]   w1 [L, hidden, dim]   w2 [L, dim, hidden]   w3 [L, hidden, dim]
//   rms_final [dim]   freq_cis_real [seq_len, head_dim/2]   freq_cis_imag [seq_len, head_dim/2]   (wcls [vocab, dim])
// Shapes above are outermost first (row-major [out, in] matrices), i.e. ne = [in, out] for our views.
// Every per-layer weight is a zero-copy slice of the stacked array.
#include <climits>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>

#include "core/strfmt.h"
#include "model/arch.h"
#include "model/loaders.h"
#include "model/vocab_load.h"

namespace mopt {

namespace {

constexpr uint64_t kHeaderBytes = 7 * 4;

std::string dir_of(const std::string& p) {
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// LoadOptions::tokenizer_path, else tokenizer.bin beside the model, else the single tok*.bin there.
Result<std::string> find_tokenizer(const std::string& model_path, const LoadOptions& opts) {
  if (!opts.tokenizer_path.empty()) return opts.tokenizer_path;
  const std::string dir = dir_of(model_path);
  if (is_regular_file(dir + "/tokenizer.bin")) return dir + "/tokenizer.bin";
  std::vector<std::string> found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 7 && n.compare(0, 3, "tok") == 0 && n.compare(n.size() - 4, 4, ".bin") == 0 &&
          is_regular_file(dir + "/" + n))
        found.push_back(n);
    }
    ::closedir(d);
  }
  if (found.size() == 1) return dir + "/" + found[0];
  if (found.empty())
    return error("no llama2.c tokenizer found beside %s (looked for tokenizer.bin and tok*.bin); pass --tokenizer PATH",
                 model_path.c_str());
  return error("%zu tok*.bin files beside %s; pass --tokenizer PATH to choose one", found.size(), model_path.c_str());
}

}  // namespace

Result<std::unique_ptr<Model>> load_llama2c_model(const std::string& path, const LoadOptions& opts) {
  MOPT_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
  const uint64_t size = map->size();
  if (size < kHeaderBytes)
    return error("%s: truncated: %llu bytes, a llama2.c checkpoint starts with a 28-byte header (and this is not "
                 "a GGUF file or a folder)", path.c_str(), (unsigned long long)size);
  int32_t h[7];
  std::memcpy(h, map->data(), sizeof(h));
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i)
    if (h[i] == 0 || (h[i] < 0 && i != 5) || h[i] == INT32_MIN)
      return error("%s: llama2.c header field %s = %d is invalid (is this a llama2.c checkpoint?)", path.c_str(),
                   names[i], h[i]);
  ModelConfig c;
  c.arch = Arch::kLlama;
  {
    std::string base = path.substr(path.find_last_of('/') + 1);
    c.name = base.substr(0, base.find_last_of('.'));
  }
  c.n_embd = h[0];
  c.n_ff = h[1];
  c.n_layer = h[2];
  c.n_head = h[3];
  c.n_head_kv = h[4];
  const bool shared = h[5] > 0;
  c.n_vocab = shared ? h[5] : -h[5];
  c.context_length = h[6];
  if (c.n_embd % c.n_head != 0)
    return error("%s: llama2.c header: dim %d is not a multiple of n_heads %d", path.c_str(), c.n_embd, c.n_head);
  c.head_dim = c.n_embd / c.n_head;
  c.rope_dim = c.head_dim;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  c.rope_style = RopeStyle::kInterleaved;
  c.tied_embeddings = shared;
  Status vs = validate_config(c);
  if (!vs.is_ok()) return vs.with_context(strfmt("%s: llama2.c header", path.c_str()));

  // validate_config bounds every field, so these products cannot overflow 64 bits; check anyway.
  const uint64_t dim = static_cast<uint64_t>(c.n_embd), hid = static_cast<uint64_t>(c.n_ff),
                 L = static_cast<uint64_t>(c.n_layer), V = static_cast<uint64_t>(c.n_vocab),
                 kv = static_cast<uint64_t>(c.kv_dim()), seq = static_cast<uint64_t>(c.context_length),
                 hd = static_cast<uint64_t>(c.head_dim);
  struct Array {
    const char* what;
    uint64_t per_layer;  // floats per layer (or total for global arrays)
    uint64_t layers;     // L for stacked arrays, 1 otherwise
    uint64_t offset = 0; // floats from the start of the data
  };
  Array arrays[] = {
      {"token_embedding", V * dim, 1}, {"rms_att", dim, L},   {"wq", dim * dim, L},  {"wk", kv * dim, L},
      {"wv", kv * dim, L},             {"wo", dim * dim, L},  {"rms_ffn", dim, L},   {"w1", hid * dim, L},
      {"w2", dim * hid, L},            {"w3", hid * dim, L},  {"rms_final", dim, 1}, {"freq_cis_real", seq * hd / 2, 1},
      {"freq_cis_imag", seq * hd / 2, 1}, {"wcls", shared ? 0 : V * dim, 1},
  };
  uint64_t floats = 0;
  for (Array& a : arrays) {
    a.offset = floats;
    uint64_t n = 0;
    if (__builtin_mul_overflow(a.per_layer, a.layers, &n) || __builtin_add_overflow(floats, n, &floats))
      return error("%s: llama2.c header sizes overflow", path.c_str());
  }
  uint64_t want = 0;
  if (__builtin_mul_overflow(floats, uint64_t{4}, &want) || __builtin_add_overflow(want, kHeaderBytes, &want))
    return error("%s: llama2.c header sizes overflow", path.c_str());
  if (size != want)
    return error("%s: a llama2.c checkpoint with this header (dim %d, hidden %d, %d layers, %d heads, %d kv heads, "
                 "vocab %d%s, seq_len %d) has %llu bytes, but the file has %llu%s",
                 path.c_str(), c.n_embd, c.n_ff, c.n_layer, c.n_head, c.n_head_kv, c.n_vocab,
                 shared ? " shared" : " separate classifier", c.context_length, (unsigned long long)want,
                 (unsigned long long)size, size < want ? " (truncated)" : " (trailing bytes; wrong format?)");

  auto m = std::make_unique<Model>();
  m->format = ModelFormat::kLlama2c;
  m->path = path;
  m->config = c;
  const float* base = reinterpret_cast<const float*>(map->data() + kHeaderBytes);  // 28 is 4-aligned
  // A view of layer `l` of stacked array `a`, with ne = [ne0, ne1] (ne1 == 0: a vector [ne0]).
  auto view = [&](const std::string& name, const Array& a, uint64_t l, int64_t ne0, int64_t ne1) {
    TensorView t;
    t.name = name;
    t.dtype = DType::F32;
    t.n_dims = ne1 == 0 ? 1 : 2;
    t.ne = {ne0, ne1 == 0 ? 1 : ne1, 1, 1};
    t.data = base + a.offset + l * a.per_layer;
    t.nbytes = a.per_layer * 4;
    m->tensors.push_back(std::move(t));
  };
  const int64_t e = c.n_embd, kvd = c.kv_dim(), ff = c.n_ff, nv = c.n_vocab;
  enum { kEmb, kRmsAtt, kWq, kWk, kWv, kWo, kRmsFfn, kW1, kW2, kW3, kRmsFinal, kFreqRe, kFreqIm, kWcls };
  view("token_embd.weight", arrays[kEmb], 0, e, nv);
  for (uint64_t l = 0; l < L; ++l) {
    auto n = [l](const char* s) { return strfmt("blk.%llu.%s", (unsigned long long)l, s); };
    view(n("attn_norm.weight"), arrays[kRmsAtt], l, e, 0);
    view(n("attn_q.weight"), arrays[kWq], l, e, e);
    view(n("attn_k.weight"), arrays[kWk], l, e, kvd);
    view(n("attn_v.weight"), arrays[kWv], l, e, kvd);
    view(n("attn_output.weight"), arrays[kWo], l, e, e);
    view(n("ffn_norm.weight"), arrays[kRmsFfn], l, e, 0);
    view(n("ffn_gate.weight"), arrays[kW1], l, e, ff);
    view(n("ffn_down.weight"), arrays[kW2], l, ff, e);
    view(n("ffn_up.weight"), arrays[kW3], l, e, ff);
  }
  view("output_norm.weight", arrays[kRmsFinal], 0, e, 0);
  if (!shared) view("output.weight", arrays[kWcls], 0, e, nv);
  m->mappings.push_back(std::move(map));
  Status s = finalize_model(*m);
  if (!s.is_ok()) return s.with_context(path);

  MOPT_ASSIGN_OR_RETURN(std::string tok_path, find_tokenizer(path, opts));
  Result<VocabData> vocab = vocab_from_llama2c(tok_path);
  if (!vocab) return vocab.status().with_context(strfmt("%s: reading the tokenizer", path.c_str()));
  m->vocab = std::move(*vocab);
  if (m->vocab.tokens.size() != static_cast<size_t>(c.n_vocab) && !m->vocab.tokens.empty())
    return error("%s: the tokenizer %s has %zu tokens but the checkpoint's vocab_size is %d; pass the matching "
                 "--tokenizer", path.c_str(), tok_path.c_str(), m->vocab.tokens.size(), c.n_vocab);
  return m;
}

}  // namespace mopt
