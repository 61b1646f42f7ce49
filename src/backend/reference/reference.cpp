#include "backend/reference/reference.h"

#include <cmath>

#include "backend/rope.h"
#include "model/model.h"

namespace mopt {
namespace {

Status load_f32(const Model& m, const std::string& name, std::vector<float>& out, bool optional = false) {
  const TensorView* t = m.find(name);
  if (!t) {
    if (optional) return Status::ok();
    return error("reference: missing tensor %s", name.c_str());
  }
  out.resize(static_cast<size_t>(t->n_elements()));
  const int64_t row = t->ne[0];
  const uint64_t rb = *row_bytes(t->dtype, static_cast<uint64_t>(row));
  for (int64_t r = 0; r < t->rows(); ++r)
    dequantize_row_ref(t->dtype, static_cast<const uint8_t*>(t->data) + r * rb, out.data() + r * row, row);
  return Status::ok();
}

// y[n] = W[n, k] x[k] (+ b)
void matvec(const std::vector<float>& w, const float* x, float* y, int n, int k, const std::vector<float>& b) {
  for (int i = 0; i < n; ++i) {
    double acc = 0;
    const float* wr = w.data() + static_cast<size_t>(i) * k;
    for (int j = 0; j < k; ++j) acc += static_cast<double>(wr[j]) * x[j];
    y[i] = static_cast<float>(acc) + (b.empty() ? 0.0f : b[i]);
  }
}

void rmsnorm(float* out, const float* x, const std::vector<float>& w, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float s = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * s * w[i];
}

// Frequency of dimension pair i (0 <= i < rot_dim/2), with linear or Llama-3 scaling.
double rope_freq(const ModelConfig& c, int i) {
  double f = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / c.rope_dim);
  if (c.rope_scaling == RopeScaling::kLinear) return f / c.rope_scale_factor;
  if (c.rope_scaling == RopeScaling::kYarn) return rope_inv_freq(c)[static_cast<size_t>(i)];  // backend/rope.h's
  if (c.rope_scaling == RopeScaling::kLlama3) {
    const double pi = 3.14159265358979323846;
    const double wavelen = 2 * pi / f;
    const double low_wl = c.rope_original_context / c.rope_low_freq_factor;
    const double high_wl = c.rope_original_context / c.rope_high_freq_factor;
    if (wavelen > low_wl) return f / c.rope_scale_factor;
    if (wavelen < high_wl) return f;
    const double smooth = (c.rope_original_context / wavelen - c.rope_low_freq_factor) /
                          (c.rope_high_freq_factor - c.rope_low_freq_factor);
    return (1 - smooth) * f / c.rope_scale_factor + smooth * f;
  }
  return f;
}

void apply_rope(const ModelConfig& c, float* head, int pos) {
  const int half = c.rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double a = pos * rope_freq(c, i);
    const float cs = static_cast<float>(std::cos(a)), sn = static_cast<float>(std::sin(a));
    const int i0 = c.rope_style == RopeStyle::kInterleaved ? 2 * i : i;
    const int i1 = c.rope_style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
    const float x0 = head[i0], x1 = head[i1];
    head[i0] = x0 * cs - x1 * sn;
    head[i1] = x0 * sn + x1 * cs;
  }
}

}  // namespace

Result<ReferenceModel> ReferenceModel::create(const Model& m) {
  ReferenceModel r;
  r.cfg_ = m.config;
  MOPT_TRY(load_f32(m, "token_embd.weight", r.tok_embd_));
  MOPT_TRY(load_f32(m, "output_norm.weight", r.out_norm_));
  if (m.find("output.weight"))
    MOPT_TRY(load_f32(m, "output.weight", r.output_));
  else
    r.output_ = r.tok_embd_;
  r.layers_.resize(static_cast<size_t>(r.cfg_.n_layer));
  for (int l = 0; l < r.cfg_.n_layer; ++l) {
    Layer& L = r.layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    MOPT_TRY(load_f32(m, p + "attn_norm.weight", L.attn_norm));
    MOPT_TRY(load_f32(m, p + "ffn_norm.weight", L.ffn_norm));
    const bool mla = r.cfg_.is_mla();
    MOPT_TRY(load_f32(m, p + "attn_q.weight", L.wq, mla));
    MOPT_TRY(load_f32(m, p + "attn_k.weight", L.wk, mla));
    MOPT_TRY(load_f32(m, p + "attn_v.weight", L.wv, mla));
    if (mla) {
      const bool ql = r.cfg_.q_lora_rank > 0;
      MOPT_TRY(load_f32(m, p + "attn_q_a.weight", L.q_a, !ql));
      MOPT_TRY(load_f32(m, p + "attn_q_a_norm.weight", L.q_a_norm, !ql));
      MOPT_TRY(load_f32(m, p + "attn_q_b.weight", L.q_b, !ql));
      MOPT_TRY(load_f32(m, p + "attn_kv_a_mqa.weight", L.kv_a));
      MOPT_TRY(load_f32(m, p + "attn_kv_a_norm.weight", L.kv_a_norm));
      MOPT_TRY(load_f32(m, p + "attn_kv_b.weight", L.kv_b));
    }
    MOPT_TRY(load_f32(m, p + "attn_output.weight", L.wo));
    MOPT_TRY(load_f32(m, p + "attn_q.bias", L.bq, true));
    MOPT_TRY(load_f32(m, p + "attn_k.bias", L.bk, true));
    MOPT_TRY(load_f32(m, p + "attn_v.bias", L.bv, true));
    MOPT_TRY(load_f32(m, p + "attn_q_norm.weight", L.q_norm, true));
    MOPT_TRY(load_f32(m, p + "attn_k_norm.weight", L.k_norm, true));
    if (r.cfg_.is_moe_layer(l)) {
      MOPT_ASSIGN_OR_RETURN(L.moe, ReferenceMoe::load(m, l));
      continue;
    }
    MOPT_TRY(load_f32(m, p + "ffn_gate.weight", L.w_gate));
    MOPT_TRY(load_f32(m, p + "ffn_up.weight", L.w_up));
    MOPT_TRY(load_f32(m, p + "ffn_down.weight", L.w_down));
  }
  return r;
}

std::vector<float> ReferenceModel::forward(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = cfg_;
  const int n = static_cast<int>(tokens.size());
  const int d = c.n_embd, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff;
  const int group = c.n_head / c.n_head_kv;
  std::vector<float> logits(static_cast<size_t>(n) * c.n_vocab);
  std::vector<float> kc(static_cast<size_t>(c.n_layer) * n * kvd), vc(kc.size());  // [layer, pos, kv_dim]
  std::vector<float> x(d), xb(d), q(qd), k(kvd), v(kvd), att(qd), o(d), g(ff), u(ff), scores(n);
  // Dense layers of a MoE model (DeepSeek-V2's first ones) leave their entries empty.
  routed_.assign(c.is_moe() ? static_cast<size_t>(c.n_layer) : 0, std::vector<std::vector<ReferenceMoe::Pick>>(n));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < d; ++i) x[i] = tok_embd_[static_cast<size_t>(tokens[t]) * d + i];
    for (int l = 0; l < c.n_layer; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      rmsnorm(xb.data(), x.data(), L.attn_norm, d, c.norm_eps);
      if (c.is_mla()) mla_qkv(L, xb.data(), t, q.data(), k.data(), v.data());
      if (!c.is_mla()) {
        matvec(L.wq, xb.data(), q.data(), qd, d, L.bq);
        matvec(L.wk, xb.data(), k.data(), kvd, d, L.bk);
        matvec(L.wv, xb.data(), v.data(), kvd, d, L.bv);
      }
      for (int h = 0; h < c.n_head && !c.is_mla(); ++h) {
        if (!L.q_norm.empty()) rmsnorm(&q[h * hd], &q[h * hd], L.q_norm, hd, c.norm_eps);
        apply_rope(c, &q[h * hd], t);
      }
      for (int h = 0; h < c.n_head_kv && !c.is_mla(); ++h) {
        if (!L.k_norm.empty()) rmsnorm(&k[h * hd], &k[h * hd], L.k_norm, hd, c.norm_eps);
        apply_rope(c, &k[h * hd], t);
      }
      float* kl = kc.data() + static_cast<size_t>(l) * n * kvd;
      float* vl = vc.data() + static_cast<size_t>(l) * n * kvd;
      std::copy(k.begin(), k.end(), kl + static_cast<size_t>(t) * kvd);
      std::copy(v.begin(), v.end(), vl + static_cast<size_t>(t) * kvd);
      const int first = c.sliding_window > 0 ? std::max(0, t - c.sliding_window + 1) : 0;
      for (int h = 0; h < c.n_head; ++h) {
        const int kvh = h / group;
        double mx = -1e300;
        for (int j = first; j <= t; ++j) {
          double s = 0;
          for (int i = 0; i < hd; ++i) s += static_cast<double>(q[h * hd + i]) * kl[static_cast<size_t>(j) * kvd + kvh * hd + i];
          scores[j] = static_cast<float>(s * c.attn_scale_mult / std::sqrt(static_cast<double>(hd)));
          mx = std::max(mx, static_cast<double>(scores[j]));
        }
        double sum = 0;
        for (int j = first; j <= t; ++j) sum += std::exp(scores[j] - mx);
        for (int i = 0; i < hd; ++i) {
          double acc = 0;
          for (int j = first; j <= t; ++j)
            acc += std::exp(scores[j] - mx) / sum * vl[static_cast<size_t>(j) * kvd + kvh * hd + i];
          att[h * hd + i] = static_cast<float>(acc);
        }
      }
      if (c.is_mla())  // each head's first v_head_dim outputs (the rest is of V's zero padding)
        for (int h = 0; h < c.n_head; ++h)
          for (int i = 0; i < c.v_head_dim; ++i) att[h * c.v_head_dim + i] = att[h * hd + i];
      matvec(L.wo, att.data(), o.data(), d, c.attn_out_dim(), {});
      for (int i = 0; i < d; ++i) x[i] += o[i];
      rmsnorm(xb.data(), x.data(), L.ffn_norm, d, c.norm_eps);
      if (c.is_moe_layer(l)) {
        L.moe.forward(c, xb.data(), o.data(), &routed_[l][t]);
        for (int i = 0; i < d; ++i) x[i] += o[i];
        continue;
      }
      matvec(L.w_gate, xb.data(), g.data(), ff, d, {});
      matvec(L.w_up, xb.data(), u.data(), ff, d, {});
      for (int i = 0; i < ff; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      matvec(L.w_down, g.data(), o.data(), d, ff, {});
      for (int i = 0; i < d; ++i) x[i] += o[i];
    }
    rmsnorm(xb.data(), x.data(), out_norm_, d, c.norm_eps);
    matvec(output_, xb.data(), logits.data() + static_cast<size_t>(t) * c.n_vocab, c.n_vocab, d, {});
  }
  return logits;
}

void ReferenceModel::mla_qkv(const Layer& L, const float* x, int pos, float* q, float* k, float* v) const {
  const ModelConfig& c = cfg_;
  const int d = c.n_embd, H = c.n_head, hd = c.head_dim, nope = c.qk_nope_dim, rope = c.rope_dim;
  const int kl = c.kv_lora_rank, vd = c.v_head_dim;
  if (c.q_lora_rank > 0) {
    std::vector<float> qa(static_cast<size_t>(c.q_lora_rank));
    matvec(L.q_a, x, qa.data(), c.q_lora_rank, d, {});
    rmsnorm(qa.data(), qa.data(), L.q_a_norm, c.q_lora_rank, ModelConfig::kMlaLatentNormEps);
    matvec(L.q_b, qa.data(), q, H * hd, c.q_lora_rank, {});
  } else {
    matvec(L.wq, x, q, H * hd, d, {});
  }
  std::vector<float> kva(static_cast<size_t>(kl + rope)), kvb(static_cast<size_t>(H) * (nope + vd));
  matvec(L.kv_a, x, kva.data(), kl + rope, d, {});
  rmsnorm(kva.data(), kva.data(), L.kv_a_norm, kl, ModelConfig::kMlaLatentNormEps);
  matvec(L.kv_b, kva.data(), kvb.data(), H * (nope + vd), kl, {});
  float* kpe = kva.data() + kl;
  apply_rope(c, kpe, pos);  // the rope dims; transformers scales cos / sin by the yarn attention factor
  for (int i = 0; i < rope; ++i) kpe[i] *= c.rope_attn_factor;
  for (int h = 0; h < H; ++h) {
    apply_rope(c, q + h * hd + nope, pos);
    for (int i = nope; i < hd; ++i) q[h * hd + i] *= c.rope_attn_factor;
    for (int i = 0; i < nope; ++i) k[h * hd + i] = kvb[static_cast<size_t>(h) * (nope + vd) + i];
    for (int i = 0; i < rope; ++i) k[h * hd + nope + i] = kpe[i];
    for (int i = 0; i < hd; ++i) v[h * hd + i] = i < vd ? kvb[static_cast<size_t>(h) * (nope + vd) + nope + i] : 0.0f;
  }
}

}  // namespace mopt
