// Prompt rows: RequestSpec::prompt_logits (the scoring path of `mopt eval`) and SamplingParams::prompt_logprobs,
// over the FakeRunner. The oracle is fake_logits() of each prompt prefix computed without any cache: every
// wanted position must arrive exactly once, in order, with the logits of its own context, whatever the chunking,
// batching, preemption, prefix cache or device sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

// Blocks of 4 tokens (so that prompts span several).
EngineConfig config(int max_model_len) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = max_model_len;
  return cfg;
}

// What one request's prompt-logits callback received.
struct Rows {
  std::vector<int> positions;       // [rows] in arrival order
  std::vector<std::vector<float>> logits;  // [rows][n_vocab]
  int chunks = 0;
  bool after_finish = false;        // a row arrived after the request's final output
};

struct PromptHarness : Harness {
  using Harness::Harness;
  std::map<uint64_t, Rows> rows;

  AddResult add_scored(std::vector<int32_t> prompt, SamplingParams p, int from, int priority = 0) {
    RequestSpec spec;
    spec.prompt = std::move(prompt);
    spec.params = std::move(p);
    spec.priority = priority;
    spec.prompt_logits_from = from;
    spec.prompt_logits = [this](const PromptLogits& pl) {
      Rows& r = rows[pl.request_id];
      ++r.chunks;
      EXPECT_EQ(pl.n_vocab, kVocab);
      EXPECT_GT(pl.n_rows, 0);
      if (results.count(pl.request_id) && results[pl.request_id].finished) r.after_finish = true;
      for (int i = 0; i < pl.n_rows; ++i) {
        r.positions.push_back(pl.first_position + i);
        const float* row = pl.logits + static_cast<size_t>(i) * kVocab;
        r.logits.emplace_back(row, row + kVocab);
      }
    };
    return engine->add_request(std::move(spec), [this](const RequestOutput& o) { on_output(o); });
  }
};

// Checks that request `id` got the rows of positions [from, prompt.size()) once each, in order, each equal to
// the cache-free logits of its prefix.
void expect_rows(PromptHarness& h, uint64_t id, const std::vector<int32_t>& prompt, int from) {
  const Rows& r = h.rows[id];
  EXPECT_FALSE(r.after_finish);
  ASSERT_EQ(r.positions.size(), prompt.size() - static_cast<size_t>(from)) << "request " << id;
  std::vector<float> want(kVocab);
  for (size_t i = 0; i < r.positions.size(); ++i) {
    const int pos = from + static_cast<int>(i);
    ASSERT_EQ(r.positions[i], pos) << "request " << id;
    fake_logits(std::span<const int32_t>(prompt).first(static_cast<size_t>(pos) + 1), kVocab, want.data());
    ASSERT_EQ(r.logits[i], want) << "request " << id << " position " << pos;
  }
}

struct Case {
  int budget;
  bool device;
  PreemptionMode mode;
  int kv_blocks;  // 0: roomy
};

void run_case(const Case& c, uint32_t seed) {
  EngineConfig cfg = config(/*max_model_len=*/48);
  cfg.max_num_batched_tokens = c.budget;
  cfg.max_num_seqs = 64;
  cfg.preemption = c.mode;
  if (c.kv_blocks) cfg.kv_cache_memory = static_cast<uint64_t>(c.kv_blocks) * 4 * 8;  // FakeRunner: 8 B/token
  if (c.mode == PreemptionMode::kSwap) cfg.swap_space_gib = 64.0 * 32 / 1073741824.0;
  PromptHarness h(cfg);
  ASSERT_TRUE(h.engine) << h.create_error;
  h.runner->device_sampling = c.device;
  std::mt19937 rng(seed);
  struct Sub {
    std::vector<int32_t> prompt;
    int from;
    int max_tokens;
    bool scored;
    uint64_t id;
  };
  std::vector<Sub> subs;
  for (int i = 0; i < 24; ++i) {
    Sub s;
    s.prompt = random_prompt(rng, 1 + static_cast<int>(rng() % 30));
    s.scored = i % 3 != 2;  // a third are plain generation requests batched with the scored ones
    s.from = s.scored ? static_cast<int>(rng() % s.prompt.size()) : 0;
    s.max_tokens = 1 + static_cast<int>(rng() % 12);
    SamplingParams p = greedy(s.max_tokens);
    AddResult a = s.scored ? h.add_scored(s.prompt, p, s.from) : h.add(s.prompt, p);
    ASSERT_EQ(a.error, AddError::kNone) << a.message;
    s.id = a.request_id;
    subs.push_back(std::move(s));
  }
  h.run();
  for (const Sub& s : subs) {
    const Collected& out = h.results[s.id];
    ASSERT_TRUE(out.finished);
    EXPECT_EQ(out.tokens, reference_generate(s.prompt, s.max_tokens, kVocab, kEos));
    if (s.scored) {
      expect_rows(h, s.id, s.prompt, s.from);
    } else {
      EXPECT_EQ(h.rows.count(s.id), 0u);
    }
  }
  EngineStats st = h.engine->stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  if (c.kv_blocks) {
    EXPECT_GT(st.preemptions, 0u) << "the pool was meant to be too small";
  }
}

TEST(EnginePromptLogits, EveryPositionOnceInOrderWhateverTheSchedule) {
  const Case cases[] = {
      {2048, false, PreemptionMode::kRecompute, 0},  // whole prompts in one step, many requests per step
      {7, false, PreemptionMode::kRecompute, 0},     // chunked prefill
      {1, false, PreemptionMode::kRecompute, 0},     // one token per step
      {7, true, PreemptionMode::kRecompute, 0},      // device sampling for the generation requests
      {2048, true, PreemptionMode::kRecompute, 0},   // more output rows than max_num_seqs: the all-host fallback
      {16, false, PreemptionMode::kRecompute, 14},   // recompute preemption: positions are not delivered twice
      {16, true, PreemptionMode::kSwap, 14},         // swap preemption
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "budget " << c.budget << " device " << c.device << " blocks " << c.kv_blocks);
    run_case(c, seed++);
  }
}

// A scored request preempted halfway through its prompt (by a better-priority request whose generation needs
// the blocks) resumes without delivering a position twice, whether it recomputes or is swapped back in.
TEST(EnginePromptLogits, PreemptedMidPrompt) {
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    EngineConfig cfg = config(/*max_model_len=*/48);
    cfg.kv_cache_memory = 12 * 4 * 8;  // 12 blocks
    cfg.max_num_batched_tokens = 2;    // one token each per step
    cfg.policy = SchedulingPolicy::kPriority;
    cfg.preemption = mode;
    if (mode == PreemptionMode::kSwap) cfg.swap_space_gib = 64.0 * 32 / 1073741824.0;
    PromptHarness h(cfg);
    ASSERT_TRUE(h.engine) << h.create_error;
    SamplingParams long_gen = greedy(40);
    long_gen.ignore_eos = true;
    const uint64_t a = h.add({7, 8}, long_gen, /*priority=*/0).request_id;
    std::vector<int32_t> prompt(30);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 2 + static_cast<int32_t>(i * 11 % 60);
    const uint64_t b = h.add_scored(prompt, greedy(1), 0, /*priority=*/1).request_id;
    h.run();
    EXPECT_GT(h.engine->stats().preemptions, 0u);
    EXPECT_EQ(h.results[a].tokens.size(), 40u);
    expect_rows(h, b, prompt, 0);
    EXPECT_GT(h.rows[b].chunks, 20);
  }
}

TEST(EnginePromptLogits, ChunksFollowChunkedPrefill) {
  EngineConfig cfg = config(/*max_model_len=*/64);
  cfg.max_num_batched_tokens = 5;
  PromptHarness h(cfg);
  std::vector<int32_t> prompt(23);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 2 + static_cast<int32_t>(i * 7 % 60);
  uint64_t id = h.add_scored(prompt, greedy(1), 0).request_id;
  h.run();
  expect_rows(h, id, prompt, 0);
  EXPECT_EQ(h.rows[id].chunks, 5);  // ceil(23 / 5) steps, one chunk each
  // Only the wanted rows were computed: 23 prompt rows, the last one also the sampling row.
  EXPECT_EQ(h.runner->total_tokens, 23u);
}

TEST(EnginePromptLogits, PrefixCacheServesOnlyUnwantedPositions) {
  EngineConfig cfg = config(/*max_model_len=*/64);
  PromptHarness h(cfg);
  std::vector<int32_t> prompt(30);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 2 + static_cast<int32_t>(i * 5 % 60);
  h.add(prompt, greedy(1));  // fills the prefix cache with the prompt's 7 full blocks
  h.run();
  const uint64_t all = h.add_scored(prompt, greedy(1), 0).request_id;
  h.run();
  EXPECT_EQ(h.results[all].cached_prompt_tokens, 0);
  expect_rows(h, all, prompt, 0);
  const uint64_t tail = h.add_scored(prompt, greedy(1), 13).request_id;  // positions < 13 are not wanted
  h.run();
  EXPECT_EQ(h.results[tail].cached_prompt_tokens, 12);  // whole blocks below position 13
  expect_rows(h, tail, prompt, 13);
}

TEST(EnginePromptLogits, PromptLogprobsMatchLogSoftmaxOfEachPrefix) {
  for (bool device : {false, true}) {
    EngineConfig cfg = config(/*max_model_len=*/64);
    cfg.max_num_batched_tokens = 6;
    Harness h(cfg);
    h.runner->device_sampling = device;
    std::vector<int32_t> prompt{3, 9, 27, 17, 40, 41, 5, 8, 60, 2, 33};
    SamplingParams p = greedy(4);
    p.ignore_eos = true;
    p.prompt_logprobs = 3;
    std::vector<std::vector<TokenLogprob>> got_lp;
    std::vector<std::vector<std::vector<TokenLogprob>>> got_top;
    RequestSpec spec;
    spec.prompt = prompt;
    spec.params = p;
    AddResult a = h.engine->add_request(std::move(spec), [&](const RequestOutput& o) {
      got_lp.push_back(o.prompt_logprobs);
      got_top.push_back(o.prompt_top_logprobs);
      h.on_output(o);
    });
    ASSERT_EQ(a.error, AddError::kNone) << a.message;
    h.run();
    ASSERT_EQ(got_lp.size(), 4u);
    for (size_t i = 1; i < got_lp.size(); ++i) EXPECT_TRUE(got_lp[i].empty() && got_top[i].empty());
    ASSERT_EQ(got_lp[0].size(), prompt.size() - 1);
    ASSERT_EQ(got_top[0].size(), prompt.size() - 1);
    for (size_t pos = 0; pos + 1 < prompt.size(); ++pos) {
      std::vector<float> lg(kVocab);
      fake_logits(std::span<const int32_t>(prompt).first(pos + 1), kVocab, lg.data());
      double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
      for (float v : lg) sum += std::exp(v - mx);
      const double lse = mx + std::log(sum);
      EXPECT_EQ(got_lp[0][pos].id, prompt[pos + 1]);
      EXPECT_NEAR(got_lp[0][pos].logprob, lg[static_cast<size_t>(prompt[pos + 1])] - lse, 1e-5);
      std::vector<int32_t> order(kVocab);
      for (int v = 0; v < kVocab; ++v) order[static_cast<size_t>(v)] = v;
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return lg[x] > lg[y]; });
      ASSERT_EQ(got_top[0][pos].size(), 3u);
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(got_top[0][pos][k].id, order[static_cast<size_t>(k)]);
        EXPECT_NEAR(got_top[0][pos][k].logprob, lg[static_cast<size_t>(order[k])] - lse, 1e-5);
      }
    }
    // Generation is unchanged by asking for prompt logprobs.
    EXPECT_EQ(h.results[a.request_id].tokens, reference_generate(prompt, 4, kVocab, -1));
  }
}

TEST(EnginePromptLogits, SeededDeviceSamplingIndependentOfScoredNeighbours) {
  EngineConfig cfg = config(/*max_model_len=*/128);
  cfg.max_num_seqs = 32;
  cfg.max_num_batched_tokens = 24;  // output rows stay below max_num_seqs: one forward_sample per step
  const SamplingParams p = seeded_top_k(1.5f, 20, 77, 30);
  std::vector<int32_t> prompt{5, 6, 7};
  std::vector<int32_t> solo_tokens;
  {
    PromptHarness solo(cfg);
    solo.runner->device_sampling = true;
    uint64_t id = solo.add(prompt, p).request_id;
    solo.run();
    solo_tokens = solo.results[id].tokens;
  }
  PromptHarness crowd(cfg);
  crowd.runner->device_sampling = true;
  std::mt19937 rng(4);
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> scored;
  for (int i = 0; i < 4; ++i) {
    auto pr = random_prompt(rng, 20);
    scored.emplace_back(crowd.add_scored(pr, greedy(2), 0).request_id, pr);
  }
  const uint64_t id = crowd.add(prompt, p).request_id;
  for (int i = 0; i < 4; ++i) {
    auto pr = random_prompt(rng, 20);
    scored.emplace_back(crowd.add_scored(pr, greedy(2), 0).request_id, pr);
  }
  crowd.run();
  EXPECT_EQ(crowd.results[id].tokens, solo_tokens);
  EXPECT_GT(crowd.runner->host_rows_fetched, 0u);  // the prompt rows came through sampled_logits()
  for (auto& [sid, pr] : scored) expect_rows(crowd, sid, pr, 0);
}

TEST(EnginePromptLogits, BadArgumentsAreRejected) {
  EngineConfig cfg = config(/*max_model_len=*/64);
  PromptHarness h(cfg);
  AddResult a = h.add_scored({3, 4, 5}, greedy(1), 3);
  EXPECT_EQ(a.error, AddError::kInvalid);
  EXPECT_NE(a.message.find("prompt_logits_from"), std::string::npos) << a.message;
  a = h.add_scored({3, 4, 5}, greedy(1), -1);
  EXPECT_EQ(a.error, AddError::kInvalid);
  SamplingParams p = greedy(1);
  p.prompt_logprobs = 21;
  a = h.add({3, 4}, p);
  EXPECT_EQ(a.error, AddError::kInvalid);
  EXPECT_NE(a.message.find("prompt_logprobs"), std::string::npos) << a.message;
}

TEST(EnginePromptLogits, ThrowingConsumerFailsOnlyItsRequest) {
  EngineConfig cfg = config(/*max_model_len=*/64);
  Harness h(cfg);
  RequestSpec bad;
  bad.prompt = {3, 4, 5, 6};
  bad.params = greedy(3);
  bad.prompt_logits = [](const PromptLogits&) { throw std::runtime_error("disk full"); };
  const uint64_t bad_id =
      h.engine->add_request(std::move(bad), [&](const RequestOutput& o) { h.on_output(o); }).request_id;
  const uint64_t good_id = h.add({3, 4, 5, 6}, greedy(3)).request_id;
  h.run();
  EXPECT_EQ(h.results[bad_id].reason, FinishReason::kError);
  EXPECT_NE(h.results[bad_id].error.find("disk full"), std::string::npos) << h.results[bad_id].error;
  EXPECT_TRUE(h.results[bad_id].tokens.empty());
  EXPECT_EQ(h.results[good_id].tokens, reference_generate({3, 4, 5, 6}, 3, kVocab, kEos));
  EngineStats st = h.engine->stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
}

}  // namespace
}  // namespace mopt::test
