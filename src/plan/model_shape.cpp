#include "plan/model_shape.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "model/loaders.h"
#include "model/model.h"

namespace mopt::plan {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

// A folder with config.json and no weight files: plan from the config.
bool config_only_dir(const std::string& dir) {
  if (!exists(dir + "/config.json")) return false;
  return !exists(dir + "/model.safetensors") && !exists(dir + "/model.safetensors.index.json");
}

}  // namespace

uint64_t ModelShape::n_params() const {
  uint64_t n = 0;
  for (const TensorShape& t : tensors) n += t.cols * t.rows;
  return n;
}

double ModelShape::token_share(const TensorShape& t) const {
  return t.experts > 1 && config.is_moe() ? static_cast<double>(config.n_expert_used) / static_cast<double>(t.experts)
                                          : 1.0;
}

uint64_t ModelShape::n_active_params() const {
  double n = 0;
  for (const TensorShape& t : tensors) n += static_cast<double>(t.cols * t.rows) * token_share(t);
  return static_cast<uint64_t>(n + 0.5);
}

ModelShape shape_from_config(const ModelConfig& c) {
  ModelShape s;
  s.config = c;
  s.source = "config.json";
  const uint64_t d = static_cast<uint64_t>(c.n_embd), q = static_cast<uint64_t>(c.q_dim()),
                 kv = static_cast<uint64_t>(c.kv_dim()), ff = static_cast<uint64_t>(c.n_ff),
                 v = static_cast<uint64_t>(c.n_vocab), hd = static_cast<uint64_t>(c.head_dim);
  auto add = [&](std::string name, uint64_t cols, uint64_t rows, uint64_t experts = 1) {
    TensorShape t;
    t.name = std::move(name);
    t.cols = cols;
    t.rows = rows * experts;
    t.experts = experts;
    s.tensors.push_back(std::move(t));
  };
  add("token_embd.weight", d, v);
  add("output_norm.weight", d, 1);
  if (!c.tied_embeddings) add("output.weight", d, v);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", d, 1);
    add(p + "ffn_norm.weight", d, 1);
    add(p + "attn_q.weight", d, q);
    add(p + "attn_k.weight", d, kv);
    add(p + "attn_v.weight", d, kv);
    add(p + "attn_output.weight", q, d);
    if (c.is_moe()) {
      const uint64_t ne = static_cast<uint64_t>(c.n_expert), fe = static_cast<uint64_t>(c.n_ff_exp),
                     sh = static_cast<uint64_t>(c.n_ff_shexp);
      add(p + "ffn_gate_inp.weight", d, ne);
      add(p + "ffn_gate_exps.weight", d, fe, ne);
      add(p + "ffn_up_exps.weight", d, fe, ne);
      add(p + "ffn_down_exps.weight", fe, d, ne);
      if (sh > 0) {
        add(p + "ffn_gate_inp_shexp.weight", d, 1);
        add(p + "ffn_gate_shexp.weight", d, sh);
        add(p + "ffn_up_shexp.weight", d, sh);
        add(p + "ffn_down_shexp.weight", sh, d);
      }
    } else {
      add(p + "ffn_gate.weight", d, ff);
      add(p + "ffn_up.weight", d, ff);
      add(p + "ffn_down.weight", ff, d);
    }
    if (c.qkv_bias) {
      add(p + "attn_q.bias", q, 1);
      add(p + "attn_k.bias", kv, 1);
      add(p + "attn_v.bias", kv, 1);
    }
    if (c.qk_norm) {
      add(p + "attn_q_norm.weight", hd, 1);
      add(p + "attn_k_norm.weight", hd, 1);
    }
  }
  return s;
}

Result<ModelShape> read_model_shape(const std::string& path) {
  std::string config_path;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    config_path = path;
  else if (is_dir(path) && config_only_dir(path))
    config_path = path + "/config.json";
  if (!config_path.empty()) {
    std::ifstream f(config_path);
    if (!f) return error("cannot read '%s'", config_path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    MOPT_ASSIGN_OR_RETURN(ModelConfig c, parse_hf_config(ss.str(), config_path));
    return shape_from_config(c);
  }
  LoadOptions opts;
  MOPT_ASSIGN_OR_RETURN(auto m, load_model(path, opts));
  ModelShape s;
  s.config = m->config;
  s.source = model_format_name(m->format);
  s.all_f32 = true;
  bool any_matrix = false;
  for (const TensorView& t : m->tensors) {
    TensorShape ts{t.name, static_cast<uint64_t>(t.ne[0]), t.n_dims > 1 ? static_cast<uint64_t>(t.rows()) : 1, t.dtype,
                   t.nbytes, t.n_dims == 3 ? static_cast<uint64_t>(t.ne[2]) : 1};
    if (ts.is_matrix()) {
      any_matrix = true;
      s.all_f32 = s.all_f32 && t.dtype == DType::F32;
    }
    s.tensors.push_back(std::move(ts));
  }
  s.all_f32 = s.all_f32 && any_matrix;
  return s;
}

}  // namespace mopt::plan
