// load_model() format detection, finalize_model() validation, Model accessors.
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/strfmt.h"
#include "model/arch.h"
#include "model/loaders.h"

namespace mopt {

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::kGGUF: return "gguf";
    case ModelFormat::kHuggingFace: return "huggingface";
    case ModelFormat::kLlama2c: return "llama2.c";
    case ModelFormat::kDummy: return "dummy";
  }
  return "?";
}

const TensorView* Model::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return &tensors[it->second];
  if (index_.size() != tensors.size()) {  // index not built yet (during loading): linear scan
    for (const auto& t : tensors)
      if (t.name == name) return &t;
  }
  return nullptr;
}

Result<const TensorView*> Model::require(const std::string& name) const {
  if (const TensorView* t = find(name)) return t;
  return error("%s: missing tensor %s", path.c_str(), name.c_str());
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += static_cast<uint64_t>(t.n_elements());
  return n;
}

namespace {

// The share of a tensor one token reads: n_expert_used / n_expert for stacked expert tensors, else 1.
double token_share(const ModelConfig& c, const TensorView& t) {
  if (!c.is_moe() || t.n_dims != 3 || t.ne[2] != c.n_expert) return 1.0;
  return static_cast<double>(c.n_expert_used) / c.n_expert;
}

}  // namespace

uint64_t Model::n_active_params() const {
  double n = 0;
  for (const auto& t : tensors) n += static_cast<double>(t.n_elements()) * token_share(config, t);
  return static_cast<uint64_t>(n + 0.5);
}

uint64_t Model::bytes_read_per_token() const {
  double n = 0;
  for (const auto& t : tensors)
    if (t.name != "token_embd.weight" || config.tied_embeddings) n += static_cast<double>(t.nbytes) * token_share(config, t);
  return static_cast<uint64_t>(n + 0.5);
}

Status finalize_model(Model& m) {
  m.index_.clear();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorView& t = m.tensors[i];
    if (!m.index_.emplace(t.name, i).second) return error("duplicate tensor %s", t.name.c_str());
    // Internal consistency of every view, whatever loader made it.
    if (t.n_dims < 0 || t.n_dims > 4) return error("tensor %s has %d dimensions", t.name.c_str(), t.n_dims);
    for (int d = 0; d < 4; ++d)
      if (t.ne[static_cast<size_t>(d)] < 1) return error("tensor %s has dimension %d <= 0", t.name.c_str(), d);
    std::optional<uint64_t> rb = row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
    uint64_t want = 0;
    if (!rb || __builtin_mul_overflow(*rb, static_cast<uint64_t>(t.rows()), &want) || want != t.nbytes)
      return error("tensor %s: %llu bytes do not match %s %s", t.name.c_str(), (unsigned long long)t.nbytes,
                   dtype_name(t.dtype), t.shape_str().c_str());
    if (!t.data) return error("tensor %s has no data", t.name.c_str());
  }
  if (m.vocab_only) return Status::ok();
  Status cs = validate_config(m.config);
  if (!cs.is_ok()) return cs.with_context("invalid model config");
  for (const TensorSpec& s : expected_tensors(m.config)) {
    const TensorView* t = m.find(s.name);
    if (!t)
      return error("missing tensor %s (needed by %s with %d layers)", s.name.c_str(), arch_name(m.config.arch),
                   m.config.n_layer);
    bool same = t->n_dims == s.n_dims;
    for (size_t d = 0; d < 4; ++d) same = same && t->ne[d] == s.ne[d];
    if (!same)
      return error("tensor %s has shape %s, expected %s", s.name.c_str(), t->shape_str().c_str(),
                   s.shape_str().c_str());
  }
  for (const auto& t : m.tensors) {
    std::optional<int> layer = layer_of_tensor(t.name);
    if (layer && *layer >= m.config.n_layer)
      return error("tensor %s belongs to layer %d, but the config has %d layers", t.name.c_str(), *layer,
                   m.config.n_layer);
  }
  return Status::ok();
}

namespace {

bool is_json_path(const std::string& p) { return p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0; }

std::string parent_dir(const std::string& p) {
  size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

}  // namespace

std::unique_ptr<PagePrefetcher> prefetch_tensors(const Model& m) {
  std::vector<PagePrefetcher::Range> ranges;
  for (const TensorView& t : m.tensors) ranges.push_back({t.data, t.nbytes});
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  return std::make_unique<PagePrefetcher>(std::move(ranges));
}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& opts) {
  if (opts.dummy) return load_dummy_model(path, opts);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return error("cannot open model '%s': %s", path.c_str(), std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return load_hf_model(path, opts);
  if (is_json_path(path)) return load_hf_model(parent_dir(path), opts);  // a config.json: its folder
  char magic[4] = {0, 0, 0, 0};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error("cannot open model '%s': %s", path.c_str(), std::strerror(errno));
  ssize_t got = ::read(fd, magic, 4);
  ::close(fd);
  if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf_model(path, opts);
  if (opts.vocab_only)
    return error("%s: not a GGUF file; --vocab-only loading needs a GGUF file", path.c_str());
  return load_llama2c_model(path, opts);
}

}  // namespace mopt
