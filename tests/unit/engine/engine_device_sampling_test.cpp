// The engine with a runner that samples on the device (ModelRunner::forward_sample): rows are routed one by
// one (device sampler vs host sampler from fetched logits), greedy outputs equal the logits path and the
// cache-free oracle, seeded requests do not depend on what they are batched with.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

EngineConfig small_config() {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 256;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 40;
  return cfg;
}

// Speculative verification rows go to the device sampler up to the runner's max_sample_rows() (the CUDA runner:
// max_num_seqs + num_speculative_tokens), here a single stream's k + 1 rows with max_num_seqs 1; greedy output
// still equals the oracle.
TEST(EngineDeviceSampling, VerificationRowsUpToTheRunnersLimit) {
  EngineConfig cfg = small_config();
  cfg.max_num_seqs = 1;
  cfg.speculative.method = SpecMethod::kNgram;
  cfg.speculative.num_speculative_tokens = 4;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  Harness h(cfg);
  ASSERT_TRUE(h.engine) << h.create_error;
  h.runner->device_sampling = true;
  h.runner->sample_rows_limit = 5;
  const std::vector<int32_t> prompt = {3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4};
  const uint64_t id = h.add(prompt, greedy(30)).request_id;
  h.run();
  const Collected& c = h.results[id];
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.tokens, reference_generate(prompt, 30, kVocab, kEos));
  EXPECT_GT(h.engine->stats().spec_num_drafts, 0u);
  EXPECT_GT(h.runner->max_sample_rows_seen, 1) << "no verification rows on the device";
  EXPECT_LE(h.runner->max_sample_rows_seen, 5);
  EXPECT_EQ(h.runner->host_rows_fetched, 0u);
}

// Runs the same mixed greedy load on an engine with and without device sampling.
TEST(EngineDeviceSampling, GreedyEqualsLogitsPathAndOracle) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 24; ++i) {
    prompts.push_back(random_prompt(rng, 1 + static_cast<int>(rng() % 30)));
    max_tokens.push_back(1 + static_cast<int>(rng() % 40));
  }
  std::vector<std::vector<int32_t>> outs[2];
  for (int dev = 0; dev < 2; ++dev) {
    Harness h(small_config());
    ASSERT_TRUE(h.engine) << h.create_error;
    h.runner->device_sampling = dev == 1;
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(h.add(prompts[i], greedy(max_tokens[i])).request_id);
    h.run();
    uint64_t generated = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Collected& c = h.results[ids[i]];
      ASSERT_TRUE(c.finished);
      EXPECT_EQ(c.tokens, reference_generate(prompts[i], max_tokens[i], kVocab, kEos)) << "request " << i;
      generated += c.tokens.size();
      outs[dev].push_back(c.tokens);
    }
    if (dev == 1) {  // every token came from the device sampler, no logits were fetched
      EXPECT_EQ(h.runner->sample_rows_total, generated);
      EXPECT_EQ(h.runner->host_rows_fetched, 0u);
      EXPECT_GT(h.runner->forward_sample_calls, 0);
    } else {
      EXPECT_EQ(h.runner->forward_sample_calls, 0);
    }
    EngineStats s = h.engine->stats();
    EXPECT_EQ(s.free_blocks, s.num_blocks);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

// Requests needing the host sampler (logprobs, penalties, min_tokens' banned ids) share steps with device-sampled
// ones: exactly their tokens are fetched as logits, and their outputs equal those of an engine without device
// sampling (same logits, same per-request random stream).
TEST(EngineDeviceSampling, RoutesRowsByWhatEachRequestNeeds) {
  struct Case {
    SamplingParams p;
    int host_tokens;  // tokens this request must sample on the host (-1: all of them)
  };
  std::vector<Case> cases;
  {
    SamplingParams p = greedy(12);
    cases.push_back({p, 0});
    p.logprobs = 2;
    cases.push_back({p, -1});
    SamplingParams r;
    r.temperature = 0.9f;
    r.seed = 5;
    r.max_tokens = 10;
    r.ignore_eos = true;
    r.repetition_penalty = 1.3f;
    cases.push_back({r, -1});
    r.repetition_penalty = 1.f;
    r.presence_penalty = 0.5f;
    cases.push_back({r, -1});
    r.presence_penalty = 0.f;
    r.frequency_penalty = -0.5f;
    cases.push_back({r, -1});
    SamplingParams m = greedy(9);  // EOS banned for the first 4 tokens: host, then device
    m.min_tokens = 4;
    cases.push_back({m, 4});
    m.ignore_eos = true;  // nothing to ban: all on the device
    cases.push_back({m, 0});
    m.stop_token_ids = {7};  // a stop id to ban: host for the first 4
    cases.push_back({m, 4});
    SamplingParams t;  // seeded sampling without extras: device
    t.temperature = 1.2f;
    t.top_p = 0.9f;
    t.min_p = 0.02f;
    t.top_k = 30;
    t.seed = 77;
    t.max_tokens = 15;
    t.ignore_eos = true;
    cases.push_back({t, 0});
  }
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < cases.size(); ++i) prompts.push_back(random_prompt(rng, 3 + static_cast<int>(i)));

  std::vector<Collected> got[2];
  for (int dev = 0; dev < 2; ++dev) {
    Harness h(small_config());
    ASSERT_TRUE(h.engine) << h.create_error;
    h.runner->device_sampling = dev == 1;
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < cases.size(); ++i) ids.push_back(h.add(prompts[i], cases[i].p).request_id);
    h.run();
    uint64_t expect_host = 0, generated = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Collected& c = h.results[ids[i]];
      ASSERT_TRUE(c.finished) << i;
      ASSERT_NE(c.reason, FinishReason::kError) << c.error;
      generated += c.tokens.size();
      expect_host += cases[i].host_tokens < 0 ? c.tokens.size()
                                              : std::min<size_t>(c.tokens.size(), cases[i].host_tokens);
      got[dev].push_back(c);
    }
    if (dev == 1) {
      EXPECT_EQ(h.runner->sample_rows_total, generated);
      EXPECT_EQ(h.runner->host_rows_fetched, expect_host);
      EXPECT_GT(h.runner->host_rows_fetched, 0u);
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool all_host = cases[i].host_tokens < 0;
    const bool greedy_req = cases[i].p.temperature == 0;
    if (all_host || greedy_req) {  // same sampler and stream (or greedy) on both engines: identical
      EXPECT_EQ(got[0][i].tokens, got[1][i].tokens) << "case " << i;
      EXPECT_EQ(got[0][i].logprobs.size(), got[1][i].logprobs.size());
      for (size_t k = 0; k < got[0][i].logprobs.size() && k < got[1][i].logprobs.size(); ++k)
        EXPECT_EQ(got[0][i].logprobs[k].logprob, got[1][i].logprobs[k].logprob);
    }
  }
  // min_tokens was honoured on the mixed path: no EOS / stop id among the first 4 tokens.
  for (size_t i : {size_t{5}, size_t{7}}) {
    ASSERT_GE(got[1][i].tokens.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_NE(got[1][i].tokens[static_cast<size_t>(k)], kEos);
      if (i == 7) {
        EXPECT_NE(got[1][i].tokens[static_cast<size_t>(k)], 7);
      }
    }
  }
}

// A seeded device-sampled request draws the same tokens alone and in a crowd that mixes host-sampled requests.
TEST(EngineDeviceSampling, SeededIndependentOfBatch) {
  const SamplingParams p = seeded_top_k(1.5f, 20, 4321, 40);
  std::vector<int32_t> prompt{5, 6, 7};
  Harness solo(small_config());
  solo.runner->device_sampling = true;
  uint64_t s = solo.add(prompt, p).request_id;
  solo.run();

  Harness crowd(small_config());
  crowd.runner->device_sampling = true;
  std::mt19937 rng(9);
  for (int i = 0; i < 4; ++i) {
    SamplingParams o = p;
    o.seed.reset();
    if (i % 2) o.logprobs = 1;  // host rows in the same steps
    crowd.add(random_prompt(rng, 9), o);
  }
  uint64_t c = crowd.add(prompt, p).request_id;
  crowd.run();
  EXPECT_GT(crowd.runner->host_rows_fetched, 0u);
  EXPECT_EQ(solo.results[s].tokens, crowd.results[c].tokens);
  EXPECT_EQ(solo.results[s].tokens.size(), 40u);
  EXPECT_NE(solo.results[s].tokens, reference_generate(prompt, 40, kVocab, -1));  // really sampled
}

// An out-of-vocabulary id from the device fails the requests of that step with a message; others go on.
TEST(EngineDeviceSampling, BadDeviceTokenFailsOnlyThatStep) {
  Harness h(small_config());
  h.runner->device_sampling = true;
  h.runner->bad_token_at_call = 1;
  uint64_t a = h.add({3, 4, 5}, greedy(5)).request_id;
  h.run();
  EXPECT_EQ(h.results[a].reason, FinishReason::kError);
  EXPECT_NE(h.results[a].error.find("device sampler"), std::string::npos) << h.results[a].error;
  uint64_t b = h.add({3, 4, 5}, greedy(5)).request_id;
  h.run();
  EXPECT_EQ(h.results[b].tokens, reference_generate({3, 4, 5}, 5, kVocab, kEos));
  EngineStats s = h.engine->stats();
  EXPECT_EQ(s.free_blocks, s.num_blocks);
}

}  // namespace
}  // namespace mopt::test
