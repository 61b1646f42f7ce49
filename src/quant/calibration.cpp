// Calibration (AWQ, GPTQ): token sequences and the layer-by-layer fp32 forward pass that records linear-layer inputs.
#include "quant/calibration.h"

#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/rope.h"
#include "backend/cpu/quant.h"
#include "core/mmap.h"
#include "core/strfmt.h"
#include "quant/calib_text.h"
#include "tokenizer/tokenizer.h"

namespace mopt::quant {

Result<std::vector<std::vector<int32_t>>> calibration_sequences(const Model& m, std::string_view text,
                                                                const std::string& source, const char* method,
                                                                int max_tokens) {
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::create(m.vocab));
  const std::vector<int32_t> ids = tok->encode(text, /*add_special=*/false, /*parse_special=*/false);
  if (ids.size() < static_cast<size_t>(kCalibMinTokens))
    return error("calibration text %s has %zu tokens; %s needs at least %d (one quantization group of %d inputs) to "
                 "measure the layers' inputs; give a longer --calib file", source.c_str(), ids.size(), method,
                 kCalibMinTokens, kCalibMinTokens);
  const bool bos = m.vocab.add_bos && m.vocab.bos >= 0;
  std::vector<std::vector<int32_t>> seqs;
  size_t used = 0, pos = 0;
  while (pos < ids.size() && used < static_cast<size_t>(max_tokens)) {
    std::vector<int32_t> s;
    if (bos) s.push_back(m.vocab.bos);
    const size_t room = std::min<size_t>(kCalibSeqLen - s.size(), static_cast<size_t>(max_tokens) - used - s.size());
    const size_t n = std::min(room, ids.size() - pos);
    s.insert(s.end(), ids.begin() + static_cast<int64_t>(pos), ids.begin() + static_cast<int64_t>(pos + n));
    pos += n;
    used += s.size();
    if (s.size() >= 2) seqs.push_back(std::move(s));
    if (n == 0) break;
  }
  return seqs;
}

Result<std::vector<std::vector<int32_t>>> calibration_sequences_of(const Model& m, const std::string& calib_path,
                                                                   const char* method, int max_tokens) {
  std::string text = kDefaultCalibText, source = "(the bundled sample)";
  if (!calib_path.empty()) {
    MOPT_ASSIGN_OR_RETURN(text, read_file(calib_path));
    source = calib_path;
  }
  return calibration_sequences(m, text, source, method, max_tokens);
}

void column_gram(const float* x, int64_t T, int64_t K, int64_t k0, int64_t n, const float* s, float* g,
                 cpu::PackedF32& packed, ThreadPool& pool) {
  std::vector<float> xt(static_cast<size_t>(n * T));  // [n, T] the columns, transposed
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
    for (int64_t j = b; j < e; ++j) {
      const float sj = s ? s[k0 + j] : 1.0f;
      for (int64_t t = 0; t < T; ++t) xt[static_cast<size_t>(j * T + t)] = x[t * K + k0 + j] / sj;
    }
  });
  // g = xt xt^T: the rows of xt taken as both the weights and the activations of a product.
  const cpu::PackSource src{xt.data(), n, T};
  cpu::pack_f32({&src, 1}, packed);
  cpu::matmul_packed(packed, xt.data(), n, g, &pool);
}

CalibrationForward::CalibrationForward(const Model& m, std::vector<std::vector<int32_t>> seqs, ThreadPool& pool)
    : m_(m), pool_(pool), seqs_(std::move(seqs)) {
  const ModelConfig& c = m.config;
  for (const auto& s : seqs_) T_ += static_cast<int64_t>(s.size());
  h_.resize(static_cast<size_t>(T_ * c.n_embd));
  const TensorView& emb = *m.find("token_embd.weight");
  const uint64_t rb = *row_bytes(emb.dtype, static_cast<uint64_t>(c.n_embd));
  int64_t t = 0;
  for (const auto& s : seqs_)
    for (int32_t id : s)
      cpu::dequantize_row(emb.dtype, static_cast<const uint8_t*>(emb.data) + static_cast<uint64_t>(id) * rb,
                          h_.data() + (t++) * c.n_embd, c.n_embd);
  inv_freq_ = rope_inv_freq(c);
}

LayerInputs CalibrationForward::run_layer(int l, const LinearHook& hook) {
  MOPT_CHECK(l == next_layer_, "calibration: layer %d run out of order (expected %d)", l, next_layer_);
  ++next_layer_;
  const ModelConfig& c = m_.config;
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff, T = T_;
  const std::string p = strfmt("blk.%d.", l);
  auto w = [&](const char* name) { return m_.find(p + name); };
  auto f32 = [&](const char* name) {  // a small tensor (norm, bias) as fp32, empty where absent
    std::vector<float> v;
    if (const TensorView* t = w(name)) {
      v.resize(static_cast<size_t>(t->n_elements()));
      cpu::dequantize_row(t->dtype, t->data, v.data(), t->n_elements());
    }
    return v;
  };
  auto linear = [&](const char* name, const std::vector<float>& x, int64_t out_dim, const char* bias) {
    std::vector<float> y(static_cast<size_t>(T * out_dim));
    const TensorView* given = hook ? hook(p + name, x.data(), T, static_cast<int64_t>(x.size()) / T) : nullptr;
    cpu::matmul(given ? *given : *w(name), x.data(), T, y.data(), &pool_);
    const std::vector<float> b = f32(bias);
    if (!b.empty())
      for (int64_t t = 0; t < T; ++t) cpu::add(y.data() + t * out_dim, b.data(), out_dim);
    return y;
  };
  auto norm_rows = [&](const std::vector<float>& x, const std::vector<float>& g) {
    std::vector<float> y(x.size());
    pool_.parallel_for(T, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) cpu::rmsnorm(y.data() + t * d, x.data() + t * d, g.data(), d, c.norm_eps);
    });
    return y;
  };

  LayerInputs in;
  in.T = T;
  in.attn = norm_rows(h_, f32("attn_norm.weight"));
  std::vector<float> q = linear("attn_q.weight", in.attn, qd, "attn_q.bias");
  std::vector<float> k = linear("attn_k.weight", in.attn, kvd, "attn_k.bias");
  const std::vector<float> v = linear("attn_v.weight", in.attn, kvd, "attn_v.bias");
  const std::vector<float> qn = f32("attn_q_norm.weight"), kn = f32("attn_k_norm.weight");
  in.out.assign(static_cast<size_t>(T * qd), 0.0f);
  int64_t t0 = 0;
  for (const auto& s : seqs_) {  // one causal sequence at a time, positions from 0
    const int32_t n = static_cast<int32_t>(s.size());
    for (int32_t i = 0; i < n; ++i) {
      float* qt = q.data() + (t0 + i) * qd;
      float* kt = k.data() + (t0 + i) * kvd;
      for (int h = 0; !qn.empty() && h < c.n_head; ++h) cpu::rmsnorm(qt + h * c.head_dim, qt + h * c.head_dim, qn.data(), c.head_dim, c.norm_eps);
      for (int h = 0; !kn.empty() && h < c.n_head_kv; ++h) cpu::rmsnorm(kt + h * c.head_dim, kt + h * c.head_dim, kn.data(), c.head_dim, c.norm_eps);
      cpu::rope(qt, c.n_head, c.head_dim, c.rope_dim, i, inv_freq_.data(), c.rope_style);
      cpu::rope(kt, c.n_head_kv, c.head_dim, c.rope_dim, i, inv_freq_.data(), c.rope_style);
    }
    // The sequence's K/V rows are one cache block of n positions: [n, n_head_kv, head_dim].
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
    const int32_t query_start[2] = {0, n}, seq_len = n, block = 0;
    cpu::PagedAttnArgs a;
    a.q = q.data() + t0 * qd;
    a.out = in.out.data() + t0 * qd;
    a.k_cache = k.data() + t0 * kvd;
    a.v_cache = v.data() + t0 * kvd;
    a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = c.head_dim, a.block_size = n;
    a.n_seqs = 1;
    a.query_start = query_start;
    a.seq_lens = &seq_len;
    a.positions = positions.data();
    a.block_tables = &block;
    a.max_blocks_per_seq = 1;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.sliding_window = c.sliding_window;
    cpu::paged_attention(a, &pool_);
    t0 += n;
  }
  const std::vector<float> o = linear("attn_output.weight", in.out, d, "");
  for (int64_t i = 0; i < T * d; ++i) h_[static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
  in.mlp = norm_rows(h_, f32("ffn_norm.weight"));
  const std::vector<float> g = linear("ffn_gate.weight", in.mlp, ff, ""), u = linear("ffn_up.weight", in.mlp, ff, "");
  in.down.resize(static_cast<size_t>(T * ff));
  cpu::swiglu(in.down.data(), g.data(), u.data(), T * ff);
  const std::vector<float> y = linear("ffn_down.weight", in.down, d, "");
  for (int64_t i = 0; i < T * d; ++i) h_[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
  return in;
}

}  // namespace mopt::quant
