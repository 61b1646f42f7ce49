// Per-token statistics of a model's predictions over scored targets: negative log-likelihood (perplexity),
// and against a reference model's predictions at the same positions: KL(ref || model), top-1 agreement and
// top-k overlap. Definitions in docs/eval.md. Keeps O(1) per token (one float for the KL percentile), never
// the logits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace mopt::eval {

struct EvalMetrics {
  int64_t n_scored = 0;
  double nll = 0;        // mean negative log-likelihood of the targets under the model, nats
  double ppl = 0;        // exp(nll)
  bool has_ref = false;  // the fields below are set only against a reference
  double ref_nll = 0, ref_ppl = 0;
  double ppl_delta = 0;  // ppl - ref_ppl
  double ppl_ratio = 0;  // ppl / ref_ppl
  double kl_mean = 0;    // KL(ref || model) per token, nats: mean, P99 (nearest rank), max
  double kl_p99 = 0;
  double kl_max = 0;
  double top1 = 0;       // fraction of tokens whose most likely id (lowest id on ties) is the same in both
  double topk = 0;       // mean over tokens of |top-k(ref) ∩ top-k(model)| / k
  int top_k = 0;         // k
};

class TokenScorer {
 public:
  // top_k in [1, n_vocab].
  TokenScorer(int n_vocab, int top_k);

  struct TokenScore {
    double nll = 0, ref_nll = 0, kl = 0;  // ref_nll and kl: 0 without a reference
  };
  // One scored target: the model's logits row [n_vocab] and, against a reference, the reference's row at the
  // same position [n_vocab] (nullptr without one). Error on NaN / +inf logits (nothing is recorded then).
  Result<TokenScore> add(const float* model, const float* ref, int32_t target);

  int64_t n_scored() const { return n_; }
  EvalMetrics metrics() const;

 private:
  struct Row {
    double lse = 0;  // log-sum-exp of the row
    double max = 0;
  };
  Status scan(const float* x, Row& r, std::vector<double>* exps, std::vector<int32_t>& top) const;

  int n_vocab_, k_;
  int64_t n_ = 0, n_ref_ = 0;
  double nll_sum_ = 0, ref_nll_sum_ = 0, kl_sum_ = 0, kl_max_ = 0, topk_sum_ = 0;
  int64_t top1_same_ = 0;
  std::vector<float> kl_;                 // [tokens scored against the reference] for the percentile
  std::vector<double> ref_exp_;           // [n_vocab] scratch: exp(ref - max)
  std::vector<int32_t> top_m_, top_r_;    // [k] scratch: best ids, best first
};

}  // namespace mopt::eval
