// Sampler tests against hand-computed distributions and transformations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/sampler.h"
#include "core/argmax.h"

namespace mopt {
namespace {

int32_t draw(std::vector<float> logits, const SamplingParams& p, SamplerRng& rng, std::vector<int32_t> prompt = {},
             std::vector<int32_t> output = {}, std::vector<int32_t> banned = {}) {
  return sample_token(logits, p, prompt, output, banned, rng).token;
}

std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int n = 60000) {
  SamplerRng rng(7);
  std::vector<double> f(logits.size(), 0);
  for (int i = 0; i < n; ++i) f[static_cast<size_t>(draw(logits, p, rng))] += 1.0 / n;
  return f;
}

SamplingParams temp(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

TEST(Sampler, GreedyArgmaxLowestIdOnTies) {
  SamplerRng rng(1);
  EXPECT_EQ(draw({0.1f, 3.0f, -2.0f, 3.0f}, temp(0), rng), 1);
  EXPECT_EQ(draw({-5.0f, -1.0f}, temp(0), rng), 1);
}

// argmax_first (the vectorized greedy pick shared with the CPU runner) against a plain scan, over lengths
// around the vector width, ties, infinities and NaNs.
TEST(Sampler, ArgmaxFirstMatchesPlainScan) {
  auto plain = [](const std::vector<float>& x) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(x.size()); ++i)
      if (x[static_cast<size_t>(i)] > x[static_cast<size_t>(best)]) best = i;
    return best;
  };
  Xoshiro256 rng(7);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 512, 1000}) {
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<float> x(static_cast<size_t>(n));
      const int levels = 1 + rep % 5;  // few distinct values: many ties
      for (float& v : x) v = static_cast<float>(static_cast<int>(rng.uniform() * levels)) - 2.0f;
      const int specials = rep % 4;
      for (int k = 0; k < specials; ++k) {
        const float pick[] = {-inf, inf, nan};
        x[static_cast<size_t>(rng.uniform() * n)] = pick[(rep / 4 + k) % 3];
      }
      if (rep % 50 == 0) std::fill(x.begin(), x.end(), -inf);
      ASSERT_EQ(argmax_first(x.data(), n), plain(x)) << "n " << n << " rep " << rep;
    }
  }
}

TEST(Sampler, TemperatureOneMatchesSoftmax) {
  auto f = frequencies({0.0f, std::log(2.0f), std::log(3.0f)}, temp(1));
  EXPECT_NEAR(f[0], 1.0 / 6, 0.01);
  EXPECT_NEAR(f[1], 2.0 / 6, 0.01);
  EXPECT_NEAR(f[2], 3.0 / 6, 0.01);
}

TEST(Sampler, TemperatureScalesLogits) {
  auto f = frequencies({0.0f, std::log(4.0f)}, temp(2));  // exp(ln4 / 2) = 2: probabilities 1/3, 2/3
  EXPECT_NEAR(f[0], 1.0 / 3, 0.01);
  EXPECT_NEAR(f[1], 2.0 / 3, 0.01);
}

TEST(Sampler, TopKTopPMinP) {
  const std::vector<float> lg{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams k = temp(1);
  k.top_k = 2;
  auto f = frequencies(lg, k);
  EXPECT_NEAR(f[0], 0.625, 0.01);
  EXPECT_NEAR(f[1], 0.375, 0.01);
  EXPECT_EQ(f[2] + f[3], 0.0);

  SamplingParams tp = temp(1);
  tp.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: two tokens
  f = frequencies(lg, tp);
  EXPECT_NEAR(f[0], 0.625, 0.01);
  EXPECT_EQ(f[2] + f[3], 0.0);
  tp.top_p = 0.9f;  // three tokens: 0.5/0.95, 0.3/0.95, 0.15/0.95
  f = frequencies(lg, tp);
  EXPECT_NEAR(f[2], 0.15 / 0.95, 0.01);
  EXPECT_EQ(f[3], 0.0);

  SamplingParams mp = temp(1);
  mp.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
  f = frequencies(lg, mp);
  EXPECT_NEAR(f[1], 0.375, 0.01);
  EXPECT_EQ(f[2] + f[3], 0.0);

  SamplingParams one = temp(5);
  one.top_k = 1;
  f = frequencies(lg, one, 2000);
  EXPECT_NEAR(f[0], 1.0, 1e-9);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplerRng rng(1);
  SamplingParams p = temp(0);
  p.repetition_penalty = 2.0f;
  EXPECT_EQ(draw({2.0f, 1.5f, -1.0f}, p, rng, {0}), 1);      // 2 / 2 = 1 < 1.5
  EXPECT_EQ(draw({2.0f, 0.9f, -1.0f}, p, rng, {0}), 0);      // 1 > 0.9
  EXPECT_EQ(draw({-1.0f, -1.5f}, p, rng, {}, {0}), 1);       // -1 * 2 = -2 < -1.5
  EXPECT_EQ(draw({-1.0f, -1.5f}, temp(0), rng, {}, {0}), 0);  // no penalty
}

TEST(Sampler, PresenceAndFrequencyPenaltiesUseOutputOnly) {
  SamplerRng rng(1);
  SamplingParams f = temp(0);
  f.frequency_penalty = 0.3f;  // 1 - 2 * 0.3 = 0.4 < 0.5
  EXPECT_EQ(draw({1.0f, 0.5f}, f, rng, {}, {0, 0}), 1);
  f.frequency_penalty = 0.2f;  // 0.6 > 0.5
  EXPECT_EQ(draw({1.0f, 0.5f}, f, rng, {}, {0, 0}), 0);
  SamplingParams pr = temp(0);
  pr.presence_penalty = 0.6f;  // 0.4 < 0.5, once however often it occurred
  EXPECT_EQ(draw({1.0f, 0.5f}, pr, rng, {}, {0}), 1);
  EXPECT_EQ(draw({1.0f, 0.5f}, pr, rng, {0, 0, 0}, {}), 0) << "prompt tokens are not penalized";
}

TEST(Sampler, BannedIdsAreNeverDrawn) {
  SamplerRng rng(3);
  EXPECT_EQ(draw({5.0f, 1.0f, 0.0f}, temp(0), rng, {}, {}, {0}), 1);
  for (int i = 0; i < 200; ++i) EXPECT_NE(draw({5.0f, 1.0f, 0.0f}, temp(1), rng, {}, {}, {0}), 0);
}

TEST(Sampler, SeedsReproduce) {
  const std::vector<float> lg{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
  SamplerRng a(42), b(42), c(43);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 50; ++i) {
    sa.push_back(draw(lg, temp(1), a));
    sb.push_back(draw(lg, temp(1), b));
    sc.push_back(draw(lg, temp(1), c));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  SamplerRng rng(1);
  SamplingParams p = temp(0);
  p.logprobs = 2;
  p.repetition_penalty = 3.0f;  // must not affect the reported logprobs
  std::vector<float> lg{1.0f, 3.0f, 2.0f};
  auto r = sample_token(lg, p, std::vector<int32_t>{1}, {}, {}, rng);
  const double lse = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0));
  EXPECT_EQ(r.token, 2);  // 3 / 3 = 1 < 2
  EXPECT_NEAR(r.logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].id, 1);
  EXPECT_NEAR(r.top[0].logprob, 3.0 - lse, 1e-6);
  EXPECT_EQ(r.top[1].id, 2);
}

TEST(Sampler, ValidatesParams) {
  SamplingParams p;
  EXPECT_EQ(validate_sampling_params(p, 10), "");
  p.temperature = -1;
  EXPECT_NE(validate_sampling_params(p, 10).find("temperature"), std::string::npos);
  p = {};
  p.top_k = -1;
  EXPECT_NE(validate_sampling_params(p, 10).find("top_k"), std::string::npos);
  p = {};
  p.max_tokens = 0;
  EXPECT_NE(validate_sampling_params(p, 10).find("max_tokens"), std::string::npos);
  p = {};
  p.stop_token_ids = {10};
  EXPECT_NE(validate_sampling_params(p, 10).find("stop_token_ids"), std::string::npos);
  p = {};
  p.logprobs = 21;
  EXPECT_NE(validate_sampling_params(p, 10).find("logprobs"), std::string::npos);
  p = {};
  p.min_p = std::nanf("");
  EXPECT_NE(validate_sampling_params(p, 10).find("min_p"), std::string::npos);
}

}  // namespace
}  // namespace mopt
