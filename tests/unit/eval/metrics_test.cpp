// TokenScorer against a naive implementation written out here: probabilities as exp(x) / sum exp(x) in long
// double, KL as sum p log(p / q), top-k by a full stable sort. Rows with ties and masked (-inf) ids included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "eval/metrics.h"

namespace mopt::eval {
namespace {

std::vector<long double> probs(const std::vector<float>& x) {
  long double mx = -INFINITY, s = 0;
  for (float v : x) mx = std::max<long double>(mx, v);
  std::vector<long double> p(x.size());
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp(static_cast<long double>(x[i]) - mx);
  for (auto& v : p) v /= s;
  return p;
}

std::vector<int> top_ids(const std::vector<float>& x, int k) {
  std::vector<int> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return x[a] > x[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

TEST(EvalMetrics, AgreesWithANaiveComputation) {
  const int V = 37, K = 5, N = 300;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 2);
  TokenScorer sc(V, K);
  long double nll = 0, ref_nll = 0, kl_sum = 0, topk = 0;
  int top1 = 0;
  std::vector<double> kls;
  std::vector<float> margins, flip_margins;  // the reference's top-1 minus top-2 logit: every target, flips
  for (int t = 0; t < N; ++t) {
    std::vector<float> ref(V), model(V);
    for (int v = 0; v < V; ++v) {
      ref[v] = nd(rng);
      model[v] = ref[v] + 0.3f * nd(rng);
    }
    if (t % 7 == 0) {  // ties: the lower id ranks first in both
      ref[3] = ref[9] = model[3] = model[9] = 20;
    }
    if (t % 11 == 0) ref[5] = -INFINITY;  // an id the reference rules out
    int target = static_cast<int>(rng() % V);
    if (ref[target] == -INFINITY) target = 0;  // a text token the reference rules out would make its ppl infinite
    auto r = sc.add(model.data(), ref.data(), target);
    ASSERT_TRUE(r) << r.message();
    const auto p = probs(ref), q = probs(model);
    long double kl = 0;
    for (int v = 0; v < V; ++v)
      if (p[v] > 0) kl += p[v] * std::log(p[v] / q[v]);
    EXPECT_NEAR(r->kl, static_cast<double>(kl), 1e-12);
    EXPECT_NEAR(r->nll, static_cast<double>(-std::log(q[target])), 1e-12);
    kl_sum += kl;
    kls.push_back(static_cast<double>(kl));
    nll -= std::log(q[target]);
    ref_nll -= std::log(p[target]);
    const auto tr = top_ids(ref, K), tm = top_ids(model, K);
    top1 += tr[0] == tm[0];
    margins.push_back(ref[tr[0]] - ref[tr[1]]);
    if (tr[0] != tm[0]) flip_margins.push_back(margins.back());
    int common = 0;
    for (int a : tr) common += std::count(tm.begin(), tm.end(), a) > 0;
    topk += static_cast<long double>(common) / K;
  }
  const EvalMetrics m = sc.metrics();
  ASSERT_TRUE(m.has_ref);
  EXPECT_EQ(m.n_scored, N);
  EXPECT_EQ(m.top_k, K);
  EXPECT_NEAR(m.nll, static_cast<double>(nll / N), 1e-12);
  EXPECT_NEAR(m.ref_nll, static_cast<double>(ref_nll / N), 1e-12);
  EXPECT_NEAR(m.ppl, std::exp(static_cast<double>(nll / N)), 1e-9);
  EXPECT_NEAR(m.ppl_delta, m.ppl - std::exp(static_cast<double>(ref_nll / N)), 1e-9);
  EXPECT_NEAR(m.ppl_ratio, m.ppl / m.ref_ppl, 1e-12);
  EXPECT_NEAR(m.kl_mean, static_cast<double>(kl_sum / N), 1e-12);
  std::sort(kls.begin(), kls.end());
  EXPECT_NEAR(m.kl_max, kls.back(), 1e-12);
  EXPECT_NEAR(m.kl_p99, kls[static_cast<size_t>(std::ceil(0.99 * N)) - 1], 1e-6 * kls.back());  // nearest rank
  EXPECT_DOUBLE_EQ(m.top1, static_cast<double>(top1) / N);
  EXPECT_NEAR(m.topk, static_cast<double>(topk / N), 1e-12);
  EXPECT_GT(m.kl_mean, 0.01);
  EXPECT_LT(m.top1, 1.0);
  EXPECT_GT(m.top1, 0.3);
  // Flips and the reference's margin there (nearest-rank median and P90 of a sorted copy).
  ASSERT_EQ(m.top1_flips, static_cast<int64_t>(flip_margins.size()));
  ASSERT_GT(flip_margins.size(), 10u);
  std::sort(flip_margins.begin(), flip_margins.end());
  const auto rank = [&](double q) {
    return flip_margins[static_cast<size_t>(std::ceil(q * static_cast<double>(flip_margins.size()))) - 1];
  };
  EXPECT_EQ(m.flip_margin_median, rank(0.5));
  EXPECT_EQ(m.flip_margin_p90, rank(0.9));
  EXPECT_EQ(m.flip_margin_max, flip_margins.back());
  const auto within = std::count_if(margins.begin(), margins.end(), [&](float x) { return x <= rank(0.9); });
  EXPECT_DOUBLE_EQ(m.near_tie_share, static_cast<double>(within) / N);
  EXPECT_GT(m.near_tie_share, 1.0 - m.top1);  // ties and close calls are commoner than flips
}

TEST(EvalMetrics, FlipMarginsWithTopKOfOne) {
  TokenScorer sc(4, 1);
  const float ref_a[4] = {2.0f, 1.75f, 0, 0}, model_a[4] = {1.0f, 1.5f, 0, 0};  // flip at margin 0.25
  const float ref_b[4] = {0, 3.0f, 0, 0}, model_b[4] = {0, 2.0f, 0, 0};          // agree, margin 3
  const float ref_c[4] = {-INFINITY, 1.0f, -INFINITY, -INFINITY}, model_c[4] = {0, 1.0f, 0, 0};  // margin +inf
  ASSERT_TRUE(sc.add(model_a, ref_a, 0));
  ASSERT_TRUE(sc.add(model_b, ref_b, 1));
  ASSERT_TRUE(sc.add(model_c, ref_c, 1));
  const EvalMetrics m = sc.metrics();
  EXPECT_EQ(m.top1_flips, 1);
  EXPECT_FLOAT_EQ(m.flip_margin_median, 0.25f);
  EXPECT_FLOAT_EQ(m.flip_margin_p90, 0.25f);
  EXPECT_FLOAT_EQ(m.flip_margin_max, 0.25f);
  EXPECT_DOUBLE_EQ(m.near_tie_share, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.topk, 2.0 / 3);  // k = 1: the top-1 overlap
}

TEST(EvalMetrics, IdenticalRowsAgreeExactly) {
  const int V = 64;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-8, 8);
  TokenScorer sc(V, 8);
  for (int t = 0; t < 50; ++t) {
    std::vector<float> row(V);
    for (float& x : row) x = u(rng);
    ASSERT_TRUE(sc.add(row.data(), row.data(), t % V));
  }
  const EvalMetrics m = sc.metrics();
  EXPECT_EQ(m.kl_mean, 0.0);
  EXPECT_EQ(m.kl_max, 0.0);
  EXPECT_EQ(m.kl_p99, 0.0);
  EXPECT_EQ(m.top1, 1.0);
  EXPECT_EQ(m.topk, 1.0);
  EXPECT_EQ(m.ppl_delta, 0.0);
  EXPECT_EQ(m.ppl_ratio, 1.0);
  EXPECT_EQ(m.top1_flips, 0);
  EXPECT_EQ(m.near_tie_share, 0.0);
}

TEST(EvalMetrics, WithoutAReferenceOnlyPerplexity) {
  TokenScorer sc(4, 1);
  const float a[4] = {0, 0, 0, 0};  // uniform: nll = log 4
  ASSERT_TRUE(sc.add(a, nullptr, 2));
  const EvalMetrics m = sc.metrics();
  EXPECT_FALSE(m.has_ref);
  EXPECT_NEAR(m.ppl, 4.0, 1e-12);
}

TEST(EvalMetrics, NonFiniteLogitsAreAnError) {
  TokenScorer sc(4, 2);
  const float nan_row[4] = {0, NAN, 0, 0}, inf_row[4] = {0, 1, INFINITY, 0}, ok[4] = {1, 2, 3, 4};
  const float masked[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  auto a = sc.add(nan_row, nullptr, 0);
  ASSERT_FALSE(a);
  EXPECT_NE(a.message().find("model"), std::string::npos) << a.message();
  auto b = sc.add(ok, inf_row, 0);
  ASSERT_FALSE(b);
  EXPECT_NE(b.message().find("reference"), std::string::npos) << b.message();
  EXPECT_FALSE(sc.add(masked, nullptr, 0));
  EXPECT_EQ(sc.n_scored(), 0);  // nothing recorded from a failed row
}

}  // namespace
}  // namespace mopt::eval
