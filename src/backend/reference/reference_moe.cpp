#include "backend/reference/reference_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/model.h"

namespace mopt {
namespace {

// Tensor `name` as fp32, rows of ne[0]; `want` elements or an error.
Status read_f32(const Model& m, const std::string& name, int64_t want, std::vector<float>& out) {
  const TensorView* t = m.find(name);
  if (!t) return error("reference: missing tensor %s", name.c_str());
  if (t->n_elements() != want)
    return error("reference: tensor %s has %lld elements, expected %lld", name.c_str(),
                 static_cast<long long>(t->n_elements()), static_cast<long long>(want));
  out.resize(static_cast<size_t>(want));
  const uint64_t rb = *row_bytes(t->dtype, static_cast<uint64_t>(t->ne[0]));
  for (int64_t r = 0; r < t->rows(); ++r)
    dequantize_row_ref(t->dtype, static_cast<const uint8_t*>(t->data) + r * rb, out.data() + r * t->ne[0], t->ne[0]);
  return Status::ok();
}

// Expert slices of a stacked [.., .., n_expert] tensor read as fp32.
Status read_experts(const Model& m, const std::string& name, int n_expert, int64_t each,
                    std::vector<std::vector<float>>& out) {
  std::vector<float> all;
  MOPT_TRY(read_f32(m, name, each * n_expert, all));
  out.resize(static_cast<size_t>(n_expert));
  for (int e = 0; e < n_expert; ++e) out[e].assign(all.begin() + e * each, all.begin() + (e + 1) * each);
  return Status::ok();
}

// y[rows] = W[rows, cols] x[cols] in fp64.
std::vector<double> apply(const std::vector<float>& w, const std::vector<double>& x, int rows) {
  const size_t cols = x.size();
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) y[i] += static_cast<double>(w[i * cols + j]) * x[j];
  return y;
}

// down(silu(gate x) * up x).
std::vector<double> swiglu_mlp(const std::vector<float>& gate, const std::vector<float>& up,
                               const std::vector<float>& down, const std::vector<double>& x, int ff) {
  std::vector<double> g = apply(gate, x, ff), u = apply(up, x, ff);
  for (int i = 0; i < ff; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return apply(down, g, static_cast<int>(x.size()));
}

}  // namespace

Result<ReferenceMoe> ReferenceMoe::load(const Model& m, int layer) {
  const ModelConfig& c = m.config;
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t d = c.n_embd, ff = c.n_ff_exp, sh = c.n_ff_shexp;
  ReferenceMoe r;
  MOPT_TRY(read_f32(m, p + "ffn_gate_inp.weight", d * c.n_expert, r.router));
  MOPT_TRY(read_experts(m, p + "ffn_gate_exps.weight", c.n_expert, d * ff, r.gate));
  MOPT_TRY(read_experts(m, p + "ffn_up_exps.weight", c.n_expert, d * ff, r.up));
  MOPT_TRY(read_experts(m, p + "ffn_down_exps.weight", c.n_expert, d * ff, r.down));
  if (sh > 0) {
    if (c.arch != Arch::kDeepseek2) MOPT_TRY(read_f32(m, p + "ffn_gate_inp_shexp.weight", d, r.sh_gate_inp));
    MOPT_TRY(read_f32(m, p + "ffn_gate_shexp.weight", d * sh, r.sh_gate));
    MOPT_TRY(read_f32(m, p + "ffn_up_shexp.weight", d * sh, r.sh_up));
    MOPT_TRY(read_f32(m, p + "ffn_down_shexp.weight", d * sh, r.sh_down));
  }
  return r;
}

void ReferenceMoe::forward(const ModelConfig& c, const float* xf, float* out, std::vector<Pick>* picked) const {
  const int d = c.n_embd;
  const std::vector<double> x(xf, xf + d);
  // Router: softmax over every expert, then the n_expert_used most probable (a stable sort: ties to the lower id).
  std::vector<double> prob = apply(router, x, c.n_expert);
  const double mx = *std::max_element(prob.begin(), prob.end());
  double z = 0;
  for (double& v : prob) z += (v = std::exp(v - mx));
  for (double& v : prob) v /= z;
  std::vector<int> order(static_cast<size_t>(c.n_expert));
  std::iota(order.begin(), order.end(), 0);
  if (c.n_expert_groups > 0) {  // group_limited_greedy: drop the experts of all but the best topk_group groups
    const int per = c.n_expert / c.n_expert_groups;
    std::vector<double> best(static_cast<size_t>(c.n_expert_groups), 0.0);
    for (int e = 0; e < c.n_expert; ++e) best[e / per] = std::max(best[e / per], prob[e]);
    std::vector<int> groups(best.size());
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) { return best[a] > best[b]; });
    groups.resize(static_cast<size_t>(c.n_group_used));
    std::erase_if(order, [&](int e) { return std::find(groups.begin(), groups.end(), e / per) == groups.end(); });
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  order.resize(static_cast<size_t>(c.n_expert_used));
  double kept = 0;
  for (int e : order) kept += prob[e];
  std::vector<double> acc(static_cast<size_t>(d), 0.0);
  for (int e : order) {
    const double w = (c.expert_norm_topk ? prob[e] / kept : prob[e]) * c.expert_weights_scale;
    const std::vector<double> y = swiglu_mlp(gate[e], up[e], down[e], x, c.n_ff_exp);
    for (int i = 0; i < d; ++i) acc[i] += w * y[i];
    if (picked) picked->push_back({e, w});
  }
  if (!sh_gate.empty()) {  // Qwen2-MoE: shared expert scaled by sigmoid(w · x); DeepSeek-V2: not scaled
    double s = 0;
    for (int i = 0; i < static_cast<int>(sh_gate_inp.size()); ++i) s += static_cast<double>(sh_gate_inp[i]) * x[i];
    const double gate_w = sh_gate_inp.empty() ? 1.0 : 1.0 / (1.0 + std::exp(-s));
    const std::vector<double> y = swiglu_mlp(sh_gate, sh_up, sh_down, x, c.n_ff_shexp);
    for (int i = 0; i < d; ++i) acc[i] += gate_w * y[i];
  }
  for (int i = 0; i < d; ++i) out[i] = static_cast<float>(acc[i]);
}

}  // namespace mopt
