// Randomized engine tests over the FakeRunner: many seeds, random configurations (block size, pool size, token
// budget, policy, preemption mode, prefix caching, speculative decoding with n-gram or draft-model proposals) and
// random add / step / abort sequences. After every step the engine invariants are checked; every request that was
// not aborted must produce the oracle's tokens; all requests finish once arrivals stop; and the block pool ends
// where it started.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <set>

#include "engine/kv_sizing.h"
#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

struct Totals {
  uint64_t preemptions = 0, swapped_blocks = 0, spec_drafts = 0, spec_accepted = 0, draft_rounds = 0, draft_accepted = 0;
};

// A draft model for the fake target: the target's own function, except that where another of the row's
// pseudo-random logits (uniform in [-1, 1]) is above 1/3 it proposes the next id instead: a third of its
// proposals are wrong, decided by the context (not by the pick: the fake model repeats some ids forever).
class NoisyDraft : public FakeRunner {
 public:
  NoisyDraft() : FakeRunner(kVocab) {}
  Status forward(const ForwardBatch& b, float* logits) override {
    MOPT_TRY(FakeRunner::forward(b, logits));
    for (int i = 0; i < b.n_out(); ++i) {
      float* row = logits + static_cast<size_t>(i) * kVocab;
      const int best = static_cast<int>(std::max_element(row, row + kVocab) - row);
      if (row[(best + 7) % kVocab] > 1.f / 3) row[(best + 1) % kVocab] = 5.0f;
    }
    return Status::ok();
  }
};

void run_seed(uint32_t seed, Totals& totals) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  EngineConfig cfg;
  cfg.block_size = std::vector<int>{1, 2, 4, 8, 16}[static_cast<size_t>(pick(0, 4))];
  cfg.max_model_len = pick(16, 64);
  const int min_blocks = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
  const int nb = pick(min_blocks, min_blocks * 3);
  cfg.kv_cache_memory = static_cast<uint64_t>(nb) * cfg.block_size * 8;
  cfg.max_num_seqs = pick(1, 12);
  cfg.max_num_batched_tokens = pick(1, 48);
  cfg.policy = rng() % 2 ? SchedulingPolicy::kFcfs : SchedulingPolicy::kPriority;
  cfg.preemption = rng() % 2 ? PreemptionMode::kRecompute : PreemptionMode::kSwap;
  if (cfg.preemption == PreemptionMode::kSwap) cfg.swap_space_gib = pick(1, nb) * cfg.block_size * 8 / 1073741824.0;
  cfg.enable_prefix_caching = rng() % 4 != 0;
  std::mt19937 spec_rng(seed + 1000003);  // its own stream: the other choices stay those of each seed
  std::unique_ptr<DraftModel> draft;
  if (spec_rng() % 2) {  // n-gram proposals: with the fake model's hashed outputs mostly rejected (rollbacks)
    cfg.speculative.method = SpecMethod::kNgram;
    cfg.speculative.num_speculative_tokens = 1 + static_cast<int>(spec_rng() % 5);
    cfg.speculative.prompt_lookup_min = 1;
    cfg.speculative.prompt_lookup_max = 1 + static_cast<int>(spec_rng() % 3);
    if (spec_rng() % 2) {  // a draft model instead: mostly accepted, a third rejected
      cfg.speculative.method = SpecMethod::kDraftModel;
      cfg.speculative.prompt_lookup_min = cfg.speculative.prompt_lookup_max = 0;
      cfg.speculative.model = "noisy fake draft";
      draft = std::make_unique<DraftModel>(std::make_unique<NoisyDraft>(), nullptr);
      // Its pool comes out of the same memory (kv_sizing.h): a block beside each of the target's (8 bytes a token,
      // as the target's) and ceil(k / block_size) + 1 more for each sequence's proposals; the target keeps nb.
      KvSizing k;
      k.block_bytes = k.draft_block_bytes = static_cast<uint64_t>(cfg.block_size) * 8;
      k.draft_extra_blocks = (cfg.speculative.num_speculative_tokens + cfg.block_size - 1) / cfg.block_size + 1;
      k.max_num_seqs = cfg.max_num_seqs;
      cfg.kv_cache_memory = k.memory_for_blocks(static_cast<uint64_t>(nb));
    }
  }
  SCOPED_TRACE(strfmt("seed %u bs %d blocks %d len %d seqs %d budget %d policy %d mode %d caching %d spec %d", seed,
                      cfg.block_size, nb, cfg.max_model_len, cfg.max_num_seqs, cfg.max_num_batched_tokens,
                      static_cast<int>(cfg.policy), static_cast<int>(cfg.preemption), cfg.enable_prefix_caching,
                      cfg.speculative.num_speculative_tokens));
  const bool drafted = draft != nullptr;
  Harness h(cfg, 1 << 20, nullptr, std::move(draft));
  ASSERT_TRUE(h.engine) << h.create_error;
  ASSERT_EQ(h.engine->stats().num_blocks, nb);

  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(pick(1, cfg.max_model_len - 1)));
    for (auto& t : p) t = pick(2, kVocab - 1);
    prefixes.push_back(p);
  }
  struct Sent {
    std::vector<int32_t> prompt;
    int max_tokens;
  };
  std::map<uint64_t, Sent> sent;
  std::set<uint64_t> aborted;
  int steps = 0;
  for (int it = 0; it < 250; ++it) {
    const int a = pick(0, 9);
    if (a < 3) {
      std::vector<int32_t> p = prefixes[static_cast<size_t>(pick(0, 2))];
      p.resize(static_cast<size_t>(pick(1, static_cast<int>(p.size()))));
      for (int i = pick(0, 3); i > 0; --i) p.push_back(pick(2, kVocab - 1));
      const int mt = pick(1, 24);
      AddResult r = h.add(p, greedy(mt), pick(0, 3));
      if (static_cast<int>(p.size()) + mt > cfg.max_model_len) {
        EXPECT_EQ(r.error, AddError::kTooLong);
      } else {
        ASSERT_EQ(r.error, AddError::kNone) << r.message;
        sent[r.request_id] = {p, mt};
      }
    } else if (a == 3 && !sent.empty()) {
      auto itr = sent.begin();
      std::advance(itr, pick(0, static_cast<int>(sent.size()) - 1));
      if (!h.results[itr->first].finished) aborted.insert(itr->first);
      h.engine->abort(itr->first);
    } else {
      h.engine->step();
      ++steps;
      ASSERT_EQ(check_engine_invariants(*h.engine), "") << "step " << steps;
    }
  }
  h.run(50000);
  if (::testing::Test::HasFatalFailure()) return;
  for (auto& [id, s] : sent) {
    const Collected& c = h.results[id];
    ASSERT_TRUE(c.finished) << id;
    if (c.reason == FinishReason::kAbort) {
      EXPECT_TRUE(aborted.count(id)) << id;
      continue;
    }
    EXPECT_EQ(c.tokens, reference_generate(s.prompt, s.max_tokens, kVocab, kEos)) << "request " << id;
  }
  EngineStats st = h.engine->stats();
  EXPECT_EQ(st.free_blocks, nb) << "blocks leaked";
  EXPECT_EQ(st.running + st.waiting + st.swapped, 0);
  EXPECT_FALSE(h.engine->step()) << "idle engine reports work";
  totals.preemptions += st.preemptions;
  totals.swapped_blocks += h.runner->swapped_out_blocks;
  totals.spec_drafts += st.spec_num_drafts;
  totals.spec_accepted += st.spec_num_accepted_tokens;
  if (drafted) {
    totals.draft_rounds += st.spec_num_drafts;
    totals.draft_accepted += st.spec_num_accepted_tokens;
  }
}

TEST(EngineRandom, OutputsAndInvariantsOverManySeeds) {
  Totals t;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    run_seed(seed, t);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(t.preemptions, 100u);
  EXPECT_GT(t.swapped_blocks, 100u);
  EXPECT_GT(t.spec_drafts, 1000u);
  EXPECT_GT(t.spec_accepted, 0u);
  EXPECT_GT(t.draft_rounds, 500u);
  EXPECT_GT(t.draft_accepted, t.draft_rounds);  // the noisy draft is mostly right: more than one token a round
  std::printf("[ engine random ] 300 seeds: %llu preemptions, %llu blocks swapped out, %llu speculative rounds "
              "(%llu proposals accepted; %llu rounds with a draft model, %llu of their proposals accepted)\n",
              static_cast<unsigned long long>(t.preemptions), static_cast<unsigned long long>(t.swapped_blocks),
              static_cast<unsigned long long>(t.spec_drafts), static_cast<unsigned long long>(t.spec_accepted),
              static_cast<unsigned long long>(t.draft_rounds), static_cast<unsigned long long>(t.draft_accepted));
}

}  // namespace
}  // namespace mopt::test
