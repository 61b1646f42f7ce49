// AWQ (Lin et al., "AWQ: Activation-aware Weight Quantization", and AutoAWQ's search), layer by layer:
//  1. Scales. For each group of linear layers that share an input X [T, K] and can fold a per-input scale s into the
//     operation before them (q/k/v after attn_norm; attn_output after attn_v when their sizes match; gate/up after
//     ffn_norm; down after up), s = mean|X|^r / mean_w^(1-r) (mean_w: the mean over the group's rows of |w| relative
//     to the max |w| of its group of 128), normalized by sqrt(max s * min s), for r = 0, 1/20, ..., 19/20, and s = 1
//     (plain round-to-nearest). The s kept minimizes the squared error of the linear layers' outputs
//     sum_j |X Q(W_j diag(s))^T / s - X W_j^T|^2 over calibration tokens (Q: INT4_G128 round-to-nearest). The
//     weights take W diag(s); the operation before takes 1/s (norm weights, or the rows and bias of attn_v / ffn_up).
//  2. Clipping. For every linear but q and k, per row and group of 128, the range [-c, c] with c = max|w| (1 - i/20),
//     i = 0..9, whose quantization error on the scaled inputs, d^T (X_g^T X_g) d with d = Q(w) - w, is smallest.
// docs/quantize.md has the details and how they differ from AutoAWQ.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "core/formats/formats.h"
#include "core/strfmt.h"
#include "quant/calibration.h"
#include "quant/convert.h"
#include "quant/pipeline.h"

namespace mopt::quant {

namespace {

constexpr int kScaleGrid = 20;      // ratios r = i / 20, i < 20 (AutoAWQ's n_grid)
constexpr int kClipSteps = 10;      // c = max|w| (1 - i/20), i < 10 (AutoAWQ: max_shrink 0.5, n_grid 20)
constexpr int kSearchTokens = 512;  // calibration tokens in the scale search's products (evenly spaced)

// w [N, K] replaced by its INT4_G128 round-to-nearest values (quantize then dequantize, the reference conversion).
void fake_quant(float* w, int64_t N, int64_t K, ThreadPool& pool) {
  pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
    std::vector<BlockINT4_G128> q(static_cast<size_t>(K / kQKGroup));
    for (int64_t n = b; n < e; ++n) {
      formats::int4_g128_from_float(w + n * K, q.data(), K);
      formats::int4_g128_to_float(q.data(), w + n * K, K);
    }
  });
}

class Awq : public WeightTransform {
 public:
  Awq(const Model& m, std::vector<std::vector<int32_t>> seqs, ThreadPool& pool)
      : m_(m), pool_(pool), fwd_(m, std::move(seqs), pool) {}

  Status begin_layer(int l) override {
    const ModelConfig& c = m_.config;
    col_.clear(), div_.clear(), clip_.clear();
    const LayerInputs in = fwd_.run_layer(l);
    const std::string p = strfmt("blk.%d.", l);
    auto fold = [&](const std::vector<float>& x, int64_t K, std::vector<std::string> linears,
                    std::vector<std::string> before) {
      for (std::string& s : linears) s = p + s;
      const std::vector<float> s = search_scale(x, in.T, K, linears);
      for (const std::string& n : linears) col_[n] = s;
      for (const std::string& n : before) div_[p + n] = s;
    };
    fold(in.attn, c.n_embd, {"attn_q.weight", "attn_k.weight", "attn_v.weight"}, {"attn_norm.weight"});
    if (c.kv_dim() == c.q_dim()) fold(in.out, c.q_dim(), {"attn_output.weight"}, {"attn_v.weight", "attn_v.bias"});
    fold(in.mlp, c.n_embd, {"ffn_gate.weight", "ffn_up.weight"}, {"ffn_norm.weight"});
    fold(in.down, c.n_ff, {"ffn_down.weight"}, {"ffn_up.weight"});
    const std::pair<const char*, const std::vector<float>*> clipped[] = {
        {"attn_v.weight", &in.attn}, {"attn_output.weight", &in.out}, {"ffn_gate.weight", &in.mlp},
        {"ffn_up.weight", &in.mlp},  {"ffn_down.weight", &in.down}};
    for (const auto& [name, x] : clipped) search_clip(p + name, *x, in.T);
    return Status::ok();
  }

  void apply(const std::string& name, float* x, int64_t rows, int64_t k) override {
    if (auto it = col_.find(name); it != col_.end())
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) x[r * k + j] *= it->second[static_cast<size_t>(j)];
    if (auto it = div_.find(name); it != div_.end()) {
      const std::vector<float>& s = it->second;
      if (rows == 1) {  // a norm weight or a bias: one value per output
        for (int64_t j = 0; j < k; ++j) x[j] /= s[static_cast<size_t>(j)];
      } else {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < k; ++j) x[r * k + j] /= s[static_cast<size_t>(r)];
      }
    }
    if (auto it = clip_.find(name); it != clip_.end())
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const float cmax = it->second[static_cast<size_t>(r * (k / kQKGroup) + j / kQKGroup)];
          x[r * k + j] = std::clamp(x[r * k + j], -cmax, cmax);
        }
  }

 private:
  // y [M, N] = x [M, K] w^T for fp32 w [N, K] (the CPU backend's packed fp32 product).
  void product(const float* w, int64_t N, int64_t K, const float* x, int64_t M, float* y) {
    const cpu::PackSource src{w, N, K};
    cpu::pack_f32({&src, 1}, packed_);
    cpu::matmul_packed(packed_, x, M, y, &pool_);
  }

  // The weights of linear `name` as fp32 [N, K] with the layer's scales applied (not clipped).
  std::vector<float> scaled(const std::string& name, int64_t* N, int64_t* K) {
    const TensorView& t = *m_.find(name);
    *N = t.ne[1], *K = t.ne[0];
    std::vector<float> w = to_f32(t, pool_);
    auto saved = clip_.find(name);
    MOPT_CHECK(saved == clip_.end(), "awq: %s clipped before its search", name.c_str());
    apply(name, w.data(), *N, *K);
    return w;
  }

  std::vector<float> search_scale(const std::vector<float>& x, int64_t T, int64_t K,
                                  const std::vector<std::string>& linears) {
    // mean |x| per input over every calibration token; the search's products on evenly spaced tokens.
    std::vector<double> xsum(static_cast<size_t>(K), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) xsum[static_cast<size_t>(k)] += std::fabs(x[static_cast<size_t>(t * K + k)]);
    const int64_t Ts = std::min<int64_t>(T, kSearchTokens);
    std::vector<float> xs(static_cast<size_t>(Ts * K));
    for (int64_t i = 0; i < Ts; ++i) {
      const int64_t t = i * T / Ts;
      std::copy_n(x.begin() + t * K, K, xs.begin() + i * K);
    }
    // mean over the group's rows of |w| / max |w| of its group of 128.
    std::vector<double> wsum(static_cast<size_t>(K), 0.0);
    int64_t wrows = 0;
    for (const std::string& name : linears) {
      const TensorView& t = *m_.find(name);
      const std::vector<float> w = to_f32(t, pool_);
      for (int64_t n = 0; n < t.ne[1]; ++n)
        for (int64_t g = 0; g < K / kQKGroup; ++g) {
          const float* wg = w.data() + n * K + g * kQKGroup;
          const float amax = abs_max(wg, kQKGroup) + 1e-6f;
          for (int j = 0; j < kQKGroup; ++j) wsum[static_cast<size_t>(g * kQKGroup + j)] += std::fabs(wg[j]) / amax;
        }
      wrows += t.ne[1];
    }
    // The candidates: s = 1 (round-to-nearest as is), then the grid of ratios r.
    std::vector<std::vector<float>> cand(kScaleGrid + 1, std::vector<float>(static_cast<size_t>(K), 1.0f));
    for (int i = 0; i < kScaleGrid; ++i) {
      const double r = static_cast<double>(i) / kScaleGrid;
      std::vector<float>& s = cand[static_cast<size_t>(i + 1)];
      double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double xm = xsum[static_cast<size_t>(k)] / static_cast<double>(T);
        const double wm = wsum[static_cast<size_t>(k)] / static_cast<double>(wrows);
        const double v = std::max(std::pow(xm, r) / (std::pow(wm, 1.0 - r) + 1e-4), 1e-4);
        s[static_cast<size_t>(k)] = static_cast<float>(v);
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      const double norm = std::sqrt(lo * hi);
      for (float& v : s) v = static_cast<float>(v / norm);
    }
    // Output error of each candidate, summed over the group's layers (each layer converted once).
    std::vector<double> err(cand.size(), 0.0);
    std::vector<float> wq, y, ref;
    for (const std::string& name : linears) {
      const TensorView& t = *m_.find(name);
      const int64_t N = t.ne[1];
      const std::vector<float> w = to_f32(t, pool_);
      ref.resize(static_cast<size_t>(Ts * N)), y.resize(ref.size()), wq.resize(w.size());
      product(w.data(), N, K, xs.data(), Ts, ref.data());
      for (size_t i = 0; i < cand.size(); ++i) {
        const std::vector<float>& s = cand[i];
        pool_.parallel_for(N, [&](int64_t b, int64_t e, int) {
          for (int64_t n = b; n < e; ++n)
            for (int64_t k = 0; k < K; ++k) wq[static_cast<size_t>(n * K + k)] = w[static_cast<size_t>(n * K + k)] * s[static_cast<size_t>(k)];
        });
        fake_quant(wq.data(), N, K, pool_);
        pool_.parallel_for(N, [&](int64_t b, int64_t e, int) {
          for (int64_t n = b; n < e; ++n)
            for (int64_t k = 0; k < K; ++k) wq[static_cast<size_t>(n * K + k)] /= s[static_cast<size_t>(k)];
        });
        product(wq.data(), N, K, xs.data(), Ts, y.data());
        double e2 = 0.0;
        for (size_t j = 0; j < y.size(); ++j) e2 += (static_cast<double>(y[j]) - ref[j]) * (static_cast<double>(y[j]) - ref[j]);
        err[i] += e2;
      }
    }
    return cand[static_cast<size_t>(std::min_element(err.begin(), err.end()) - err.begin())];
  }

  void search_clip(const std::string& name, const std::vector<float>& x, int64_t T) {
    int64_t N = 0, K = 0;
    const std::vector<float> w = scaled(name, &N, &K);
    const int64_t G = K / kQKGroup;
    // The inputs as the scaled weights see them (x / s), as a Gram matrix per group of 128: [G, 128, 128].
    const std::vector<float>* s = col_.count(name) ? &col_[name] : nullptr;
    std::vector<float> gram(static_cast<size_t>(G * kQKGroup * kQKGroup), 0.0f);
    for (int64_t g = 0; g < G; ++g)
      column_gram(x.data(), T, K, g * kQKGroup, kQKGroup, s ? s->data() : nullptr,
                  gram.data() + g * kQKGroup * kQKGroup, packed_, pool_);
    std::vector<float> best(static_cast<size_t>(N * G));
    pool_.parallel_for(N, [&](int64_t b, int64_t e, int) {
      BlockINT4_G128 blk;
      float wq[kQKGroup], d[kQKGroup];
      for (int64_t n = b; n < e; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const float* wg = w.data() + n * K + g * kQKGroup;
          const float amax = abs_max(wg, kQKGroup);
          float lo0 = 0.0f, hi0 = 0.0f;
          for (int j = 0; j < kQKGroup; ++j) lo0 = std::min(lo0, wg[j]), hi0 = std::max(hi0, wg[j]);
          const float* gm = gram.data() + g * kQKGroup * kQKGroup;
          float best_err = std::numeric_limits<float>::infinity();
          for (int i = 0; i < kClipSteps; ++i) {
            const float c = amax * (1.0f - static_cast<float>(i) / (2 * kClipSteps));
            formats::int4_g128_quantize_group(wg, std::max(lo0, -c), std::min(hi0, c), &blk);
            formats::int4_g128_to_float(&blk, wq, kQKGroup);
            for (int j = 0; j < kQKGroup; ++j) d[j] = wq[j] - wg[j];
            float err = 0.0f;  // d^T G d
            for (int a = 0; a < kQKGroup; ++a) err += d[a] * cpu::vec_dot_f32(gm + a * kQKGroup, d, kQKGroup);
            if (err < best_err) best_err = err, best[static_cast<size_t>(n * G + g)] = c;
          }
        }
    });
    clip_[name] = std::move(best);
  }

  const Model& m_;
  ThreadPool& pool_;
  CalibrationForward fwd_;
  std::map<std::string, std::vector<float>> col_;   // linear -> s [K]: its columns are multiplied by s
  std::map<std::string, std::vector<float>> div_;   // tensor -> s [N]: its rows (or elements) are divided by s
  std::map<std::string, std::vector<float>> clip_;  // linear -> c [N, K/128]: its groups are clamped to [-c, c]
  cpu::PackedF32 packed_;                           // product()'s packed weights, storage reused
};

}  // namespace

Result<std::unique_ptr<WeightTransform>> make_awq(const Model& m, const QuantizeOptions& o, ThreadPool& pool) {
  MOPT_ASSIGN_OR_RETURN(auto seqs, calibration_sequences_of(m, o.calib_path, "AWQ"));
  return std::unique_ptr<WeightTransform>(new Awq(m, std::move(seqs), pool));
}

}  // namespace mopt::quant
