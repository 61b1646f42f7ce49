#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/strfmt.h"

namespace mopt::eval {

TokenScorer::TokenScorer(int n_vocab, int top_k) : n_vocab_(n_vocab), k_(top_k) {
  MOPT_CHECK(n_vocab > 0 && top_k >= 1 && top_k <= n_vocab, "n_vocab %d, top_k %d", n_vocab, top_k);
  ref_exp_.resize(static_cast<size_t>(n_vocab));
  top_m_.reserve(static_cast<size_t>(top_k));
  top_r_.reserve(static_cast<size_t>(std::max(top_k, 2)));
}

namespace {
// The nearest-rank q-quantile of v (the smallest value with at least a fraction q of v at or below it); v is
// reordered. v not empty.
float nearest_rank(std::vector<float>& v, double q) {
  const size_t rank = static_cast<size_t>(std::max(1.0, std::ceil(q * static_cast<double>(v.size())))) - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}
}  // namespace

// Max, log-sum-exp and the `keep` best ids (value descending, lower id first on ties) of a row; exps (if given)
// receives exp(x - max). -inf entries are tokens the row rules out; NaN and +inf are errors.
Status TokenScorer::scan(const float* x, Row& r, std::vector<double>* exps, std::vector<int32_t>& top,
                         int keep) const {
  keep = std::min(keep, n_vocab_);
  float mx = -INFINITY;
  top.clear();
  for (int i = 0; i < n_vocab_; ++i) {
    const float v = x[i];
    if (std::isnan(v) || v == INFINITY) return error("logit %d is %g", i, static_cast<double>(v));
    mx = std::max(mx, v);
    // Keep `top` sorted best first; a later id equal to an entry ranks after it.
    if (static_cast<int>(top.size()) == keep && !(v > x[top.back()])) continue;
    if (static_cast<int>(top.size()) == keep) top.pop_back();
    auto pos = top.end();
    while (pos != top.begin() && v > x[*(pos - 1)]) --pos;
    top.insert(pos, i);
  }
  if (mx == -INFINITY) return error("every logit is -inf");
  double sum = 0;
  if (exps) {
    for (int i = 0; i < n_vocab_; ++i)
      sum += (*exps)[static_cast<size_t>(i)] = std::exp(static_cast<double>(x[i]) - mx);
  } else {
    for (int i = 0; i < n_vocab_; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  }
  r.max = mx;
  r.lse = mx + std::log(sum);
  return Status::ok();
}

Result<TokenScorer::TokenScore> TokenScorer::add(const float* model, const float* ref, int32_t target) {
  MOPT_CHECK(target >= 0 && target < n_vocab_, "target %d outside the vocabulary of %d", target, n_vocab_);
  Row m, rr;
  MOPT_TRY(scan(model, m, nullptr, top_m_, k_).with_context("the model's logits"));
  if (ref) MOPT_TRY(scan(ref, rr, &ref_exp_, top_r_, std::max(k_, 2)).with_context("the reference's logits"));
  TokenScore ts;
  ts.nll = m.lse - model[target];
  ++n_;
  nll_sum_ += ts.nll;
  if (!ref) return ts;
  ts.ref_nll = rr.lse - ref[target];
  ++n_ref_;
  ref_nll_sum_ += ts.ref_nll;
  // KL(ref || model) = sum_i p_i (log p_i - log q_i) = sum_i p_i (ref_i - model_i) - (lse_ref - lse_model), with
  // p_i = exp(ref_i - max) / sum: identical rows give exactly 0. Ids the reference rules out (p_i = 0) add 0.
  double dot = 0, sum = 0;
  for (int i = 0; i < n_vocab_; ++i) {
    const double e = ref_exp_[static_cast<size_t>(i)];
    if (e == 0) continue;
    sum += e;
    dot += e * (static_cast<double>(ref[i]) - static_cast<double>(model[i]));
  }
  const double kl = ts.kl = std::max(0.0, dot / sum - (rr.lse - m.lse));
  kl_sum_ += kl;
  kl_max_ = std::max(kl_max_, kl);
  kl_.push_back(static_cast<float>(kl));
  // The reference's top-1 / top-2 margin (+inf when it rules out every other id, or has a single id; its top-1
  // logit is finite: scan() refused an all -inf row).
  const float margin = top_r_.size() >= 2 ? ref[top_r_[0]] - ref[top_r_[1]] : INFINITY;
  margin_.push_back(margin);
  if (top_m_.front() == top_r_.front()) {
    ++top1_same_;
  } else {
    flip_margin_.push_back(margin);
  }
  int common = 0;
  for (int i = 0; i < k_; ++i)
    common += std::find(top_m_.begin(), top_m_.end(), top_r_[static_cast<size_t>(i)]) != top_m_.end();
  topk_sum_ += static_cast<double>(common) / k_;
  return ts;
}

EvalMetrics TokenScorer::metrics() const {
  EvalMetrics out;
  out.top_k = k_;
  out.n_scored = n_;
  if (n_ == 0) return out;
  out.nll = nll_sum_ / static_cast<double>(n_);
  out.ppl = std::exp(out.nll);
  if (n_ref_ == 0) return out;
  MOPT_CHECK(n_ref_ == n_, "%lld tokens, %lld of them against the reference", static_cast<long long>(n_),
             static_cast<long long>(n_ref_));
  out.has_ref = true;
  const double n = static_cast<double>(n_);
  out.ref_nll = ref_nll_sum_ / n;
  out.ref_ppl = std::exp(out.ref_nll);
  out.ppl_delta = out.ppl - out.ref_ppl;
  out.ppl_ratio = out.ppl / out.ref_ppl;
  out.kl_mean = kl_sum_ / n;
  out.kl_max = kl_max_;
  std::vector<float> sorted = kl_;
  out.kl_p99 = nearest_rank(sorted, 0.99);
  out.top1 = static_cast<double>(top1_same_) / n;
  out.topk = topk_sum_ / n;
  out.top1_flips = static_cast<int64_t>(flip_margin_.size());
  if (!flip_margin_.empty()) {
    std::vector<float> f = flip_margin_;
    out.flip_margin_median = nearest_rank(f, 0.5);
    out.flip_margin_p90 = nearest_rank(f, 0.9);
    out.flip_margin_max = *std::max_element(f.begin(), f.end());
    const auto within = std::count_if(margin_.begin(), margin_.end(),
                                      [&](float x) { return x <= out.flip_margin_p90; });
    out.near_tie_share = static_cast<double>(within) / n;
  }
  return out;
}

}  // namespace mopt::eval
