// Speculative decoding, sampled: the output follows the target's distribution. A chi-square test over many
// seeded requests (deterministic: fixed seeds) of the token drawn at the first speculated position, against the
// target's softmax computed here in double precision from the FakeRunner's logits.
//
// PromptSetup: a prompt P = [s, c, d, f1, f2, f3, s] over a 64-token vocabulary, found by search so that c is the
// argmax after P and d the argmax after P + [c]. Requests whose first token is c (about 40% of them) then have
// the n-gram proposal d for their second token (the suffix "s c" recurs at the start), which the target accepts
// with probability p(d) ~ 0.4: both the accept and the reject path run often. A wrong rule (always accepting,
// resampling the full distribution after a rejection, or taking the residual's argmax) moves p(d) or the rest
// far past the threshold. The same with a draft model proposing the target's own argmax (d after P + [c]).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

struct PromptSetup {
  std::vector<int32_t> prompt;
  int32_t c = -1, d = -1;
};

PromptSetup find_prompt() {
  const int32_t s = 5;
  for (int32_t d = 0; d < kVocab; ++d)
    for (int32_t c = 6; c < kVocab; ++c)
      for (int32_t f1 = 6; f1 < kVocab; ++f1)
        for (int32_t f2 = 6; f2 < kVocab; ++f2) {
          const int32_t f3 = 2 + (f1 + f2) % 3;
          if (d == c || d == s || f1 == c || f2 == c) continue;
          std::vector<int32_t> p = {s, c, d, f1, f2, f3, s};
          if (reference_next(p, kVocab) != c) continue;
          p.push_back(c);
          if (reference_next(p, kVocab) != d) continue;
          p.pop_back();
          return {p, c, d};
        }
  return {};
}

// softmax(fake_logits(context)) in double: the target distribution at temperature 1.
std::vector<double> target_probs(const std::vector<int32_t>& context) {
  std::vector<float> logits(kVocab);
  fake_logits(context, kVocab, logits.data());
  double mx = logits[0], sum = 0;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(kVocab);
  for (int v = 0; v < kVocab; ++v) sum += p[static_cast<size_t>(v)] = std::exp(logits[static_cast<size_t>(v)] - mx);
  for (double& x : p) x /= sum;
  return p;
}

// Chi-square statistic of `counts` against n * p, bins with an expected count below 5 pooled; df out.
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int& df) {
  double n = 0;
  for (int x : counts) n += x;
  double stat = 0, pooled_obs = 0, pooled_exp = 0;
  int bins = 0;
  for (size_t v = 0; v < counts.size(); ++v) {
    const double e = n * p[v];
    if (e < 5) {
      pooled_obs += counts[v];
      pooled_exp += e;
      continue;
    }
    stat += (counts[v] - e) * (counts[v] - e) / e;
    ++bins;
  }
  if (pooled_exp > 0) {
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++bins;
  }
  df = bins - 1;
  return stat;
}

// The chi-square quantile at upper tail 1e-4 (z = 3.719), Wilson-Hilferty.
double chi_square_critical(int df) {
  const double k = df, z = 3.719, a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

// (device sampler, draft model): the proposer is n-gram lookup or a draft model with the target's own function
// (a FakeRunner), whose greedy proposal after P + [c] is d as well.
class SpecSampling : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(SpecSampling, FirstSpeculatedTokenFollowsTheTarget) {
  const auto [device, drafted] = GetParam();
  const PromptSetup su = find_prompt();
  ASSERT_FALSE(su.prompt.empty()) << "no prompt with the wanted argmaxes";
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.max_num_seqs = 512;  // waves of 128 requests: at most 256 verification rows, all on the "device"
  cfg.speculative.method = SpecMethod::kNgram;
  cfg.speculative.num_speculative_tokens = 4;  // cut to 1 by max_tokens = 3
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  std::unique_ptr<DraftModel> draft;
  if (drafted) {
    cfg.speculative.method = SpecMethod::kDraftModel;
    cfg.speculative.prompt_lookup_min = cfg.speculative.prompt_lookup_max = 0;
    cfg.speculative.model = "fake draft";
    draft = std::make_unique<DraftModel>(std::make_unique<FakeRunner>(kVocab), nullptr);
  }
  Harness h(cfg, 1 << 20, nullptr, std::move(draft));
  ASSERT_TRUE(h.engine) << h.create_error;
  h.runner->device_sampling = device;

  constexpr int kWaves = 40, kWave = 128;
  for (int w = 0; w < kWaves; ++w) {
    for (int i = 0; i < kWave; ++i) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = static_cast<uint64_t>(w * kWave + i + 1);
      p.max_tokens = 3;
      p.ignore_eos = true;
      ASSERT_EQ(h.add(su.prompt, p).error, AddError::kNone);
    }
    while (h.engine->has_unfinished()) h.engine->step();
  }
  std::vector<int> counts(kVocab, 0);
  int first_c = 0;
  for (const auto& [id, out] : h.results) {
    ASSERT_TRUE(out.finished);
    ASSERT_EQ(out.tokens.size(), 3u);
    if (out.tokens[0] != su.c) continue;
    ++first_c;
    ++counts[static_cast<size_t>(out.tokens[1])];
  }
  const EngineStats st = h.engine->stats();
  // Every request whose first token is c had its proposal d verified (others may have had proposals too).
  EXPECT_GE(st.spec_num_drafts, static_cast<uint64_t>(first_c));
  EXPECT_GT(st.spec_num_accepted_tokens, 0u);
  if (device) {
    EXPECT_EQ(h.runner->host_rows_fetched, 0u) << "rows were sampled on the host";
  }

  std::vector<int32_t> ctx = su.prompt;
  ctx.push_back(su.c);
  const std::vector<double> p = target_probs(ctx);
  ASSERT_GT(first_c, 1500);
  int df = 0;
  const double stat = chi_square(counts, p, df);
  ASSERT_GE(df, 20);
  EXPECT_LT(stat, chi_square_critical(df)) << "df " << df << "; p(d) " << p[static_cast<size_t>(su.d)]
                                           << ", observed " << counts[static_cast<size_t>(su.d)] / double(first_c);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, SpecSampling, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "DeviceSampler" : "HostSampler") +
                                  (std::get<1>(info.param) ? "DraftModel" : "Ngram");
                         });

}  // namespace
}  // namespace mopt::test
