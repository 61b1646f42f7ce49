#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "model/model.h"

namespace mopt::cpu {

namespace {

// Bytes of one expert's matrix in a stacked [ne0, ne1, n_expert] tensor.
uint64_t expert_bytes(const TensorView& t) {
  return *row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0])) * static_cast<uint64_t>(t.ne[1]);
}

const uint8_t* expert_data(const TensorView& t, int e) {
  return static_cast<const uint8_t*>(t.data) + expert_bytes(t) * static_cast<uint64_t>(e);
}

Status check_matrix(const TensorView& t) {
  if (!matmul_supports(t.dtype, t.ne[0]))
    return error("tensor %s: the CPU matmul does not take %s weights with rows of %lld", t.name.c_str(),
                 dtype_name(t.dtype), static_cast<long long>(t.ne[0]));
  return Status::ok();
}

}  // namespace

Result<MoeLayer> moe_layer(const Model& m, int l) {
  const ModelConfig& c = m.config;
  auto get = [&](const char* what) { return m.require("blk." + std::to_string(l) + "." + what); };
  MoeLayer L;
  MOPT_ASSIGN_OR_RETURN(L.router, get("ffn_gate_inp.weight"));
  MOPT_ASSIGN_OR_RETURN(L.gate_exps, get("ffn_gate_exps.weight"));
  MOPT_ASSIGN_OR_RETURN(L.up_exps, get("ffn_up_exps.weight"));
  MOPT_ASSIGN_OR_RETURN(L.down_exps, get("ffn_down_exps.weight"));
  // Shapes were checked against the config by finalize_model(); the kernels' dtype limits are checked here.
  for (const TensorView* t : {L.router, L.gate_exps, L.up_exps, L.down_exps}) MOPT_TRY(check_matrix(*t));
  if (c.n_ff_shexp > 0) {
    MOPT_ASSIGN_OR_RETURN(L.gate_shexp, get("ffn_gate_shexp.weight"));
    MOPT_ASSIGN_OR_RETURN(L.up_shexp, get("ffn_up_shexp.weight"));
    MOPT_ASSIGN_OR_RETURN(L.down_shexp, get("ffn_down_shexp.weight"));
    for (const TensorView* t : {L.gate_shexp, L.up_shexp, L.down_shexp}) MOPT_TRY(check_matrix(*t));
    if (!c.shared_expert_gated()) return L;  // DeepSeek's shared experts have no gate
    MOPT_ASSIGN_OR_RETURN(const TensorView* g, get("ffn_gate_inp_shexp.weight"));
    if (g->n_elements() != c.n_embd)
      return error("tensor %s has %lld elements, expected %d", g->name.c_str(), (long long)g->n_elements(), c.n_embd);
    L.shexp_gate.resize(static_cast<size_t>(c.n_embd));
    dequantize_row(g->dtype, g->data, L.shexp_gate.data(), c.n_embd);
  }
  return L;
}

MoeRouting MoeRouting::of(const ModelConfig& c) {
  return MoeRouting{c.n_expert, c.n_expert_used, c.expert_norm_topk, c.expert_weights_scale, c.n_expert_groups,
                    c.n_group_used};
}

void moe_route(float* logits, int T, const MoeRouting& r, int32_t* pick, float* pick_w) {
  const int E = r.n_expert, k = r.n_used, G = r.n_groups, per_group = G > 0 ? E / G : E;
  uint64_t groups_kept = ~uint64_t{0};  // bit g: group g eligible (group_limited_greedy; n_groups <= 64 checked)
  for (int t = 0; t < T; ++t) {
    float* p = logits + static_cast<size_t>(t) * E;
    softmax(p, E);
    if (G > 0) {  // the n_groups_used groups with the largest best probability, ties to the lower group
      groups_kept = 0;
      for (int j = 0; j < r.n_groups_used; ++j) {
        int best = -1;
        float best_v = 0;
        for (int g = 0; g < G; ++g) {
          if (groups_kept >> g & 1) continue;
          float v = p[g * per_group];
          for (int e = g * per_group + 1; e < (g + 1) * per_group; ++e) v = std::max(v, p[e]);
          if (best < 0 || v > best_v) best = g, best_v = v;
        }
        groups_kept |= uint64_t{1} << best;
      }
    }
    int32_t* sel = pick + static_cast<size_t>(t) * k;
    float* w = pick_w + static_cast<size_t>(t) * k;
    float sum = 0;
    for (int j = 0; j < k; ++j) {  // j-th largest; ties go to the lower id; earlier picks excluded
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = !(groups_kept >> (e / per_group) & 1);
        for (int i = 0; i < j; ++i) taken = taken || sel[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      sel[j] = best;
      w[j] = p[best];
      sum += p[best];
    }
    for (int j = 0; j < k; ++j) w[j] = (r.norm_topk ? w[j] / sum : w[j]) * r.scale;
  }
}

void moe_ffn(const ModelConfig& c, const MoeLayer& L, const float* x, int T, float* out, MoeScratch& s,
             ThreadPool* pool) {
  const int d = c.n_embd, E = c.n_expert, k = c.n_expert_used, ff = c.n_ff_exp;
  const size_t rows = static_cast<size_t>(T) * k;
  s.probs.resize(static_cast<size_t>(T) * E);
  s.pick.resize(rows);
  s.pick_w.resize(rows);
  matmul(*L.router, x, T, s.probs.data(), pool);  // [T, E] logits
  moe_route(s.probs.data(), T, MoeRouting::of(c), s.pick.data(), s.pick_w.data());

  // Group the (token, rank) picks by expert, tokens in order within each expert.
  s.start.assign(static_cast<size_t>(E) + 1, 0);
  for (size_t i = 0; i < rows; ++i) ++s.start[static_cast<size_t>(s.pick[i]) + 1];
  for (int e = 0; e < E; ++e) s.start[e + 1] += s.start[e];
  s.row_token.resize(rows);
  s.pick_row.resize(rows);
  s.next.assign(s.start.begin(), s.start.end() - 1);  // next free row per expert
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t) * k + j;
      const int32_t r = s.next[static_cast<size_t>(s.pick[i])]++;
      s.row_token[static_cast<size_t>(r)] = t;
      s.pick_row[i] = r;
    }
  s.xg.resize(rows * d);
  s.gate.resize(rows * ff);
  s.up.resize(rows * ff);
  s.y.resize(rows * d);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(s.xg.data() + r * d, x + static_cast<size_t>(s.row_token[r]) * d, sizeof(float) * d);

  // One gate, up and down product per expert over its rows.
  for (int e = 0; e < E; ++e) {
    const int r0 = s.start[e], n = s.start[e + 1] - r0;
    if (n == 0) continue;
    float* g = s.gate.data() + static_cast<size_t>(r0) * ff;
    float* u = s.up.data() + static_cast<size_t>(r0) * ff;
    matmul_raw(L.gate_exps->dtype, expert_data(*L.gate_exps, e), ff, d, s.xg.data() + static_cast<size_t>(r0) * d, n,
               g, pool);
    matmul_raw(L.up_exps->dtype, expert_data(*L.up_exps, e), ff, d, s.xg.data() + static_cast<size_t>(r0) * d, n, u,
               pool);
    for (int i = 0; i < n; ++i) swiglu(g + static_cast<size_t>(i) * ff, g + static_cast<size_t>(i) * ff,
                                       u + static_cast<size_t>(i) * ff, ff);
    matmul_raw(L.down_exps->dtype, expert_data(*L.down_exps, e), d, ff, g, n,
               s.y.data() + static_cast<size_t>(r0) * d, pool);
  }

  if (L.gate_shexp) {
    const int sh = c.n_ff_shexp;
    s.sh_gate.resize(static_cast<size_t>(T) * sh);
    s.sh_up.resize(static_cast<size_t>(T) * sh);
    s.sh_y.resize(static_cast<size_t>(T) * d);
    matmul(*L.gate_shexp, x, T, s.sh_gate.data(), pool);
    matmul(*L.up_shexp, x, T, s.sh_up.data(), pool);
    for (int t = 0; t < T; ++t) {
      float* g = s.sh_gate.data() + static_cast<size_t>(t) * sh;
      swiglu(g, g, s.sh_up.data() + static_cast<size_t>(t) * sh, sh);
    }
    matmul(*L.down_shexp, s.sh_gate.data(), T, s.sh_y.data(), pool);
  }

  // Combine: each token's picks in rank order, then the shared expert.
  for (int t = 0; t < T; ++t) {
    float* o = out + static_cast<size_t>(t) * d;
    std::memset(o, 0, sizeof(float) * d);
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t) * k + j;
      const float w = s.pick_w[i];
      const float* y = s.y.data() + static_cast<size_t>(s.pick_row[i]) * d;
      for (int q = 0; q < d; ++q) o[q] += w * y[q];
    }
    if (L.gate_shexp) {
      const float* xt = x + static_cast<size_t>(t) * d;
      float dot = 0;
      for (int q = 0; q < static_cast<int>(L.shexp_gate.size()); ++q) dot += L.shexp_gate[q] * xt[q];
      const float gate = L.shexp_gate.empty() ? 1.0f : 1.0f / (1.0f + std::exp(-dot));
      const float* y = s.sh_y.data() + static_cast<size_t>(t) * d;
      for (int q = 0; q < d; ++q) o[q] += gate * y[q];
    }
  }
}

double moe_macs_per_token(const ModelConfig& c) {
  const double d = c.n_embd;
  return d * c.n_expert + 3.0 * d * c.n_ff_exp * c.n_expert_used + 3.0 * d * c.n_ff_shexp +
         (c.shared_expert_gated() ? d : 0.0);
}

}  // namespace mopt::cpu
