// Per-token statistics of a model's predictions over scored targets: negative log-likelihood (perplexity),
// and against a reference model's predictions at the same positions: KL(ref || model), top-1 agreement, the
// reference's top-1 / top-2 margin where the top-1 differs, and top-k overlap. Definitions in docs/eval.md.
// Keeps O(1) per token (two floats: the KL and the reference's margin, for percentiles), never the logits.
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
  // Where the top-1 ids differ ("flips"): the reference's margin there, its top-1 minus top-2 logit (nats, a
  // log-probability ratio), median / P90 (nearest rank) / max; and the share of all targets whose reference
  // margin is at most that P90 (how many targets are as close to a tie as most flips). 0 without flips.
  int64_t top1_flips = 0;
  double flip_margin_median = 0, flip_margin_p90 = 0, flip_margin_max = 0;
  double near_tie_share = 0;
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
  // keep: how many best ids `top` receives.
  Status scan(const float* x, Row& r, std::vector<double>* exps, std::vector<int32_t>& top, int keep) const;

  int n_vocab_, k_;
  int64_t n_ = 0, n_ref_ = 0;
  double nll_sum_ = 0, ref_nll_sum_ = 0, kl_sum_ = 0, kl_max_ = 0, topk_sum_ = 0;
  int64_t top1_same_ = 0;
  std::vector<float> kl_;                 // [tokens scored against the reference] for the percentile
  std::vector<float> margin_;             // [tokens scored against the reference] the reference's top-2 margin
  std::vector<float> flip_margin_;        // [top-1 flips] the same, where the top-1 ids differ
  std::vector<double> ref_exp_;           // [n_vocab] scratch: exp(ref - max)
  std::vector<int32_t> top_m_, top_r_;    // [k], [max(k, 2)] scratch: best ids, best first
};

}  // namespace mopt::eval
