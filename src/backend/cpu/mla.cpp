#include "backend/cpu/mla.h"

#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "model/model.h"

namespace mopt::cpu {

Result<MlaLayer> mla_layer(const Model& m, int l) {
  const ModelConfig& c = m.config;
  auto get = [&](const char* what) { return m.require("blk." + std::to_string(l) + "." + what); };
  MlaLayer L;
  if (c.q_lora_rank > 0) {
    MOPT_ASSIGN_OR_RETURN(L.wq_a, get("attn_q_a.weight"));
    MOPT_ASSIGN_OR_RETURN(L.wq_b, get("attn_q_b.weight"));
    MOPT_ASSIGN_OR_RETURN(const TensorView* qn, get("attn_q_a_norm.weight"));
    MOPT_TRY(tensor_to_f32(*qn, c.q_lora_rank, L.q_a_norm));
  } else {
    MOPT_ASSIGN_OR_RETURN(L.wq, get("attn_q.weight"));
  }
  MOPT_ASSIGN_OR_RETURN(L.wkv_a, get("attn_kv_a_mqa.weight"));
  MOPT_ASSIGN_OR_RETURN(L.wkv_b, get("attn_kv_b.weight"));
  MOPT_ASSIGN_OR_RETURN(const TensorView* kn, get("attn_kv_a_norm.weight"));
  MOPT_TRY(tensor_to_f32(*kn, c.kv_lora_rank, L.kv_a_norm));
  return L;  // the matrices' types are checked with the runner's other matrices
}

void mla_qkv(const ModelConfig& c, const MlaLayer& L, const float* x, int T, const float* cs, const float* sn,
             float* q, float* k, float* v, MlaScratch& s, ThreadPool* pool) {
  const int H = c.n_head, hd = c.head_dim, nope = c.qk_nope_dim, rope = c.rope_dim, vd = c.v_head_dim;
  const int kl = c.kv_lora_rank, half = rope / 2, kvb_w = nope + vd;
  const size_t Ts = static_cast<size_t>(T);
  if (c.q_lora_rank > 0) {
    const int ql = c.q_lora_rank;
    s.qa.resize(Ts * ql);
    matmul(*L.wq_a, x, T, s.qa.data(), pool);
    for (int t = 0; t < T; ++t) {
      float* r = s.qa.data() + static_cast<size_t>(t) * ql;
      rmsnorm(r, r, L.q_a_norm.data(), ql, ModelConfig::kMlaLatentNormEps);
    }
    matmul(*L.wq_b, s.qa.data(), T, q, pool);
  } else {
    matmul(*L.wq, x, T, q, pool);
  }
  s.kva.resize(Ts * (kl + rope));
  s.kvb.resize(Ts * H * kvb_w);
  matmul(*L.wkv_a, x, T, s.kva.data(), pool);
  for (int t = 0; t < T; ++t) {
    float* r = s.kva.data() + static_cast<size_t>(t) * (kl + rope);
    rmsnorm(r, r, L.kv_a_norm.data(), kl, ModelConfig::kMlaLatentNormEps);  // c_kv only; k_pe after it stays
  }
  // kv_b_proj over the normed latents: rows of kva are kl + rope wide, so gather the latents first.
  std::vector<float>& lat = s.qa;  // reused: q_a is consumed
  lat.resize(Ts * kl);
  for (int t = 0; t < T; ++t)
    std::memcpy(lat.data() + static_cast<size_t>(t) * kl, s.kva.data() + static_cast<size_t>(t) * (kl + rope),
                sizeof(float) * kl);
  matmul(*L.wkv_b, lat.data(), T, s.kvb.data(), pool);
  const float af = c.rope_attn_factor;
  for (int t = 0; t < T; ++t) {
    const float* cst = cs + static_cast<size_t>(t) * half;
    const float* snt = sn + static_cast<size_t>(t) * half;
    float* qt = q + static_cast<size_t>(t) * H * hd;
    float* kt = k + static_cast<size_t>(t) * H * hd;
    float* vt = v + static_cast<size_t>(t) * H * hd;
    float* kpe = s.kva.data() + static_cast<size_t>(t) * (kl + rope) + kl;  // [rope], shared by all heads
    rope_apply(qt + nope, H, hd, rope, cst, snt, c.rope_style);  // each head's last rope dims
    rope_apply(kpe, 1, rope, rope, cst, snt, c.rope_style);
    for (int i = 0; i < rope; ++i) kpe[i] *= af;
    const float* kvbt = s.kvb.data() + static_cast<size_t>(t) * H * kvb_w;
    for (int h = 0; h < H; ++h) {
      float* qh = qt + static_cast<size_t>(h) * hd;
      for (int i = nope; i < hd; ++i) qh[i] *= af;
      float* kh = kt + static_cast<size_t>(h) * hd;
      float* vh = vt + static_cast<size_t>(h) * hd;
      std::memcpy(kh, kvbt + static_cast<size_t>(h) * kvb_w, sizeof(float) * nope);
      std::memcpy(kh + nope, kpe, sizeof(float) * rope);
      std::memcpy(vh, kvbt + static_cast<size_t>(h) * kvb_w + nope, sizeof(float) * vd);
      std::memset(vh + vd, 0, sizeof(float) * (hd - vd));
    }
  }
}

void mla_compact(const ModelConfig& c, float* att, int T) {
  const size_t H = static_cast<size_t>(c.n_head), hd = static_cast<size_t>(c.head_dim);
  const size_t vd = static_cast<size_t>(c.v_head_dim);
  for (size_t r = 0; r < static_cast<size_t>(T) * H; ++r)  // destination never ahead of its source (vd <= hd)
    std::memmove(att + r * vd, att + r * hd, sizeof(float) * vd);
}

}  // namespace mopt::cpu
