// disable_by_batch_size (vLLM's --speculative-config field): no proposals in a step while that many requests or
// more are running, proposals again once fewer run; greedy output stays the oracle's either way.
#include <gtest/gtest.h>

#include <vector>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

EngineConfig ngram_config(int disable_by_batch_size) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 256;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 64;
  cfg.speculative.method = SpecMethod::kNgram;
  cfg.speculative.num_speculative_tokens = 4;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  cfg.speculative.disable_by_batch_size = disable_by_batch_size;
  return cfg;
}

// A prompt that repeats, so that n-gram lookup proposes at every step.
const std::vector<int32_t> kPrompt = {3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4};

// Runs requests of kPrompt with these max_tokens, all added before the first step; returns the drafts proposed.
uint64_t drafts_for(int disable_by_batch_size, const std::vector<int>& max_tokens) {
  Harness h(ngram_config(disable_by_batch_size));
  EXPECT_TRUE(h.engine) << h.create_error;
  if (!h.engine) return 0;
  std::vector<uint64_t> ids;
  for (int mt : max_tokens) ids.push_back(h.add(kPrompt, greedy(mt)).request_id);
  h.run();
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected& c = h.results[ids[i]];
    EXPECT_TRUE(c.finished) << "request " << i;
    EXPECT_EQ(c.tokens, reference_generate(kPrompt, max_tokens[i], kVocab, kEos)) << "request " << i;
  }
  return h.engine->stats().spec_num_drafts;
}

TEST(SpecDisableByBatchSize, NoProposalsWhileTheBatchIsLarge) {
  EXPECT_GT(drafts_for(2, {30}), 0u) << "one request runs: below the threshold";
  EXPECT_EQ(drafts_for(2, {30, 30, 30}), 0u) << "three requests run in every step";
  EXPECT_GT(drafts_for(4, {30, 30, 30}), 0u) << "three requests, threshold 4";
  EXPECT_GT(drafts_for(0, {30, 30, 30}), 0u) << "0: never disabled";
  // Two requests: none while both run; once the short one is done, the long one gets proposals again.
  const uint64_t resumed = drafts_for(2, {12, 40});
  EXPECT_GT(resumed, 0u);
  EXPECT_LT(resumed, drafts_for(0, {12, 40}));
}

}  // namespace
}  // namespace mopt::test
