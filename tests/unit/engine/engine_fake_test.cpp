// Engine tests over the FakeRunner (paged, context read back through block tables) against the cache-free
// reference_generate() oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <random>
#include <thread>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

struct Load {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
};
Load make_load(uint32_t seed, int n, int max_prompt, int max_out) {
  std::mt19937 rng(seed);
  Load l;
  for (int i = 0; i < n; ++i) {
    l.prompts.push_back(random_prompt(rng, 1 + static_cast<int>(rng() % static_cast<uint32_t>(max_prompt))));
    l.max_tokens.push_back(1 + static_cast<int>(rng() % static_cast<uint32_t>(max_out)));
  }
  return l;
}

// Submits the whole load at once, runs it, and checks every output against the oracle.
void run_and_check(Harness& h, const Load& l) {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < l.prompts.size(); ++i) {
    AddResult a = h.add(l.prompts[i], greedy(l.max_tokens[i]));
    ASSERT_EQ(a.error, AddError::kNone) << a.message;
    ids.push_back(a.request_id);
  }
  h.run();
  for (size_t i = 0; i < ids.size(); ++i) {
    const Collected& c = h.results[ids[i]];
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.tokens, reference_generate(l.prompts[i], l.max_tokens[i], kVocab, kEos)) << "request " << i;
    const bool eos = !c.tokens.empty() && c.tokens.back() == kEos;
    EXPECT_EQ(c.reason, eos ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(c.completion_tokens, static_cast<int>(c.tokens.size()));
  }
  EngineStats s = h.engine->stats();
  EXPECT_EQ(s.free_blocks, s.num_blocks) << "blocks leaked";
  EXPECT_EQ(s.running + s.waiting + s.swapped, 0);
}

TEST(EngineFake, ConcurrentGreedyMatchesOracle) {
  for (int n : {1, 2, 3, 8, 17, 64}) {
    for (int budget : {2048, 7, 1}) {  // 7 / 1: chunked prefill forced small
      EngineConfig cfg;
      cfg.block_size = 4;
      cfg.max_num_batched_tokens = budget;
      cfg.max_model_len = 128;
      Harness h(cfg);
      ASSERT_TRUE(h.engine) << h.create_error;
      SCOPED_TRACE(strfmt("n=%d budget=%d", n, budget));
      run_and_check(h, make_load(static_cast<uint32_t>(n * 131 + budget), n, 40, 40));
      if (budget == 2048 && n > 1) EXPECT_GT(h.runner->max_seqs_seen, 1) << "requests were not batched";
      if (budget < 2048) EXPECT_LE(h.runner->max_tokens_seen, budget);
    }
  }
}

TEST(EngineFake, ConcurrentEqualsSolo) {
  // Each request alone through its own engine vs all together: identical tokens.
  Load l = make_load(7, 12, 30, 30);
  EngineConfig cfg;
  cfg.block_size = 8;
  cfg.max_model_len = 128;
  Harness all(cfg);
  run_and_check(all, l);
  for (size_t i = 0; i < l.prompts.size(); ++i) {
    Harness solo(cfg);
    uint64_t id = solo.add(l.prompts[i], greedy(l.max_tokens[i])).request_id;
    solo.run();
    EXPECT_EQ(solo.results[id].tokens, all.results[static_cast<uint64_t>(i) + 1].tokens);
  }
}

void tiny_pool_test(PreemptionMode mode) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 48;
  cfg.kv_cache_memory = 14 * 4 * 8;  // 14 blocks of 4 tokens (FakeRunner: 8 bytes per token)
  cfg.preemption = mode;
  if (mode == PreemptionMode::kSwap) cfg.swap_space_gib = 64.0 * 32 / 1073741824.0;  // 64 host blocks
  cfg.max_num_batched_tokens = 16;
  Harness h(cfg);
  ASSERT_TRUE(h.engine) << h.create_error;
  EngineStats s0 = h.engine->stats();
  ASSERT_EQ(s0.num_blocks, 14);
  Load l = make_load(mode == PreemptionMode::kSwap ? 99 : 98, 32, 20, 28);
  run_and_check(h, l);
  EngineStats s = h.engine->stats();
  EXPECT_GT(s.preemptions, 0u) << "the pool was meant to be far too small";
  EXPECT_EQ(s.free_blocks, s0.free_blocks);
  EXPECT_EQ(s.kv_usage, 0.0);
  if (mode == PreemptionMode::kSwap) {
    EXPECT_GT(h.runner->swapped_out_blocks, 0u);
    EXPECT_EQ(h.runner->swapped_in_blocks, h.runner->swapped_out_blocks);
  } else {
    EXPECT_EQ(h.runner->swapped_out_blocks, 0u);
  }
  std::printf("[ tiny pool %s ] preemptions %llu, steps %llu, swapped blocks %llu\n",
              mode == PreemptionMode::kSwap ? "swap" : "recompute", static_cast<unsigned long long>(s.preemptions),
              static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(h.runner->swapped_out_blocks));
}
TEST(EngineFake, TinyPoolRecompute) { tiny_pool_test(PreemptionMode::kRecompute); }
TEST(EngineFake, TinyPoolSwap) { tiny_pool_test(PreemptionMode::kSwap); }

TEST(EngineFake, PrefixCachingSharedPrefix) {
  std::mt19937 rng(5);
  std::vector<int32_t> prefix = random_prompt(rng, 67);
  Load l;
  for (int i = 0; i < 10; ++i) {
    auto p = prefix;
    auto suffix = random_prompt(rng, 1 + i);
    p.insert(p.end(), suffix.begin(), suffix.end());
    l.prompts.push_back(p);
    l.max_tokens.push_back(20);
  }
  for (bool caching : {true, false}) {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.max_model_len = 256;
    cfg.enable_prefix_caching = caching;
    Harness h(cfg);
    // Warm the cache with the first request alone, then the rest together.
    Load first{{l.prompts[0]}, {l.max_tokens[0]}};
    run_and_check(h, first);
    Load rest{{l.prompts.begin() + 1, l.prompts.end()}, {l.max_tokens.begin() + 1, l.max_tokens.end()}};
    run_and_check(h, rest);
    EngineStats s = h.engine->stats();
    if (caching) {
      for (uint64_t id = 2; id <= 10; ++id) EXPECT_EQ(h.results[id].cached_prompt_tokens, 64) << id;
      EXPECT_GE(s.prefix_cache_hits, 9u * 64);
      std::printf("[ prefix cache ] hits %llu / queries %llu tokens = %.1f%%\n",
                  static_cast<unsigned long long>(s.prefix_cache_hits),
                  static_cast<unsigned long long>(s.prefix_cache_queries),
                  100.0 * static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries));
      // Fewer tokens went through the model than without caching.
      EXPECT_LT(h.runner->total_tokens, 10u * 67);
    } else {
      EXPECT_EQ(s.prefix_cache_hits, 0u);
      for (uint64_t id = 2; id <= 10; ++id) EXPECT_EQ(h.results[id].cached_prompt_tokens, 0);
    }
  }
}

TEST(EngineFake, PrefixCacheSaltIsolatesTenants) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  Harness h(cfg);
  std::mt19937 rng(11);
  auto p = random_prompt(rng, 20);
  uint64_t a = h.add(p, greedy(4), 0, "tenant-a").request_id;
  h.run();
  uint64_t b = h.add(p, greedy(4), 0, "tenant-b").request_id;
  uint64_t c = h.add(p, greedy(4), 0, "tenant-a").request_id;
  h.run();
  EXPECT_EQ(h.results[b].cached_prompt_tokens, 0);
  EXPECT_EQ(h.results[c].cached_prompt_tokens, 16);
  EXPECT_EQ(h.results[a].tokens, h.results[b].tokens);
  EXPECT_EQ(h.results[a].tokens, h.results[c].tokens);
}

TEST(EngineFake, AdmissionRejectsWhatCanNeverFit) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 40;
  cfg.kv_cache_memory = 10 * 32;  // exactly 10 blocks = 40 tokens
  Harness h(cfg);
  ASSERT_TRUE(h.engine) << h.create_error;
  AddResult r = h.add(std::vector<int32_t>(30, 5), greedy(11));
  EXPECT_EQ(r.error, AddError::kTooLong);
  EXPECT_NE(r.message.find("max_tokens"), std::string::npos) << r.message;
  EXPECT_EQ(h.add(std::vector<int32_t>(30, 5), greedy(10)).error, AddError::kNone);
  EXPECT_EQ(h.add({}, greedy(1)).error, AddError::kInvalid);
  r = h.add({3, 64}, greedy(1));
  EXPECT_EQ(r.error, AddError::kInvalid);
  EXPECT_NE(r.message.find("64"), std::string::npos) << r.message;
  SamplingParams bad = greedy(4);
  bad.top_p = 0;
  r = h.add({3}, bad);
  EXPECT_EQ(r.error, AddError::kInvalid);
  EXPECT_NE(r.message.find("top_p"), std::string::npos) << r.message;
  bad = greedy(4);
  bad.stop = {"x"};
  EXPECT_EQ(h.add({3}, bad).error, AddError::kInvalid);  // no tokenizer
  h.run();
  h.engine->stop();
  EXPECT_EQ(h.add({3}, greedy(1)).error, AddError::kStopped);
}

TEST(EngineFake, CreateRejectsBadConfigs) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  cfg.kv_cache_memory = 8 * 32;  // 8 blocks < 16 needed for one max_model_len sequence
  Harness h(cfg);
  EXPECT_FALSE(h.engine);
  EXPECT_NE(h.create_error.find("--max-model-len"), std::string::npos) << h.create_error;
  cfg.kv_cache_memory = 0;
  cfg.preemption = PreemptionMode::kSwap;
  Harness h2(cfg);
  EXPECT_NE(h2.create_error.find("--swap-space"), std::string::npos) << h2.create_error;
  cfg.preemption = PreemptionMode::kRecompute;
  cfg.max_model_len = 5000;  // FakeRunner context is 4096
  Harness h3(cfg);
  EXPECT_NE(h3.create_error.find("context length"), std::string::npos) << h3.create_error;
  cfg.max_model_len = 0;
  cfg.block_size = -1;
  Harness h4(cfg);
  EXPECT_NE(h4.create_error.find("--block-size"), std::string::npos) << h4.create_error;
  cfg.block_size = 1025;
  Harness h5(cfg);
  EXPECT_NE(h5.create_error.find("--block-size"), std::string::npos) << h5.create_error;
}

TEST(EngineFake, BlockSizeZeroIsTheRunnersDefault) {
  EngineConfig cfg;
  cfg.block_size = 0;
  cfg.max_model_len = 64;
  Harness h(cfg);
  ASSERT_TRUE(h.create_error.empty()) << h.create_error;
  EXPECT_EQ(h.engine->config().block_size, 16);  // ModelRunner::default_block_size(); the CPU runner's is 64
  EXPECT_EQ(h.engine->stats().block_size, 16);
}

TEST(EngineFake, QueueFull) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  cfg.max_waiting = 3;
  Harness h(cfg);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.add({5, 6}, greedy(2)).error, AddError::kNone);
  EXPECT_EQ(h.add({5, 6}, greedy(2)).error, AddError::kQueueFull);
  h.run();
  EXPECT_EQ(h.add({5, 6}, greedy(2)).error, AddError::kNone);
  h.run();
}

TEST(EngineFake, AbortFreesEverything) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 128;
  Harness h(cfg);
  SamplingParams p = greedy(100);
  p.ignore_eos = true;
  uint64_t a = h.add(std::vector<int32_t>(10, 7), p).request_id;
  uint64_t b = h.add(std::vector<int32_t>(10, 8), p).request_id;
  for (int i = 0; i < 5; ++i) h.engine->step();
  EXPECT_LT(h.engine->stats().free_blocks, h.engine->stats().num_blocks);
  h.engine->abort(a);
  h.engine->abort(12345);  // unknown: ignored
  h.engine->step();
  EXPECT_TRUE(h.results[a].finished);
  EXPECT_EQ(h.results[a].reason, FinishReason::kAbort);
  EXPECT_FALSE(h.results[b].finished);
  uint64_t c = h.add({9}, p).request_id;
  h.engine->abort(c);  // aborted before it was ever scheduled
  h.engine->abort(b);
  h.engine->step();
  EXPECT_EQ(h.results[b].reason, FinishReason::kAbort);
  EXPECT_EQ(h.results[c].reason, FinishReason::kAbort);
  EXPECT_TRUE(h.results[c].tokens.empty());
  EXPECT_FALSE(h.engine->has_unfinished());
  EngineStats s = h.engine->stats();
  EXPECT_EQ(s.free_blocks, s.num_blocks);
  EXPECT_EQ(check_engine_invariants(*h.engine), "");
}

TEST(EngineFake, StopTokenIdsMinTokensIgnoreEos) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 256;
  Harness h(cfg);
  std::vector<int32_t> prompt{3, 4, 5};
  auto ref = reference_generate(prompt, 60, kVocab, -1);
  // stop_token_ids: stop at the first occurrence of ref[5] (its id is reported).
  SamplingParams p = greedy(60);
  p.ignore_eos = true;
  p.stop_token_ids = {ref[5]};
  uint64_t a = h.add(prompt, p).request_id;
  // max_tokens with ignore_eos: exactly 60 tokens, finish length.
  SamplingParams q = greedy(60);
  q.ignore_eos = true;
  uint64_t b = h.add(prompt, q).request_id;
  h.run();
  auto first = std::find(ref.begin(), ref.end(), ref[5]) - ref.begin();
  EXPECT_EQ(h.results[a].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + first + 1));
  EXPECT_EQ(h.results[a].reason, FinishReason::kStop);
  EXPECT_EQ(h.results[b].tokens, ref);
  EXPECT_EQ(h.results[b].reason, FinishReason::kLength);
  // min_tokens: the stop id is banned until min_tokens are out; the greedy pick then differs from the oracle.
  SamplingParams m = greedy(30);
  m.min_tokens = 3;
  m.stop_token_ids = {reference_next(prompt, kVocab)};
  uint64_t c = h.add(prompt, m).request_id;
  h.run();
  ASSERT_GE(h.results[c].tokens.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(h.results[c].tokens[static_cast<size_t>(i)], m.stop_token_ids[0]);
}

TEST(EngineFake, LogprobsMatchLogSoftmax) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  Harness h(cfg);
  std::vector<int32_t> prompt{3, 9, 27};
  SamplingParams p = greedy(5);
  p.ignore_eos = true;
  p.logprobs = 3;
  uint64_t id = h.add(prompt, p).request_id;
  h.run();
  const Collected& c = h.results[id];
  ASSERT_EQ(c.logprobs.size(), 5u);
  ASSERT_EQ(c.top.size(), 5u);
  std::vector<int32_t> ctx = prompt;
  for (size_t i = 0; i < 5; ++i) {
    std::vector<float> lg(kVocab);
    fake_logits(ctx, kVocab, lg.data());
    double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
    for (float v : lg) sum += std::exp(v - mx);
    const int32_t t = c.tokens[i];
    EXPECT_NEAR(c.logprobs[i].logprob, lg[static_cast<size_t>(t)] - mx - std::log(sum), 1e-5);
    ASSERT_EQ(c.top[i].size(), 3u);
    EXPECT_EQ(c.top[i][0].id, t);  // greedy: the chosen token is the most likely
    EXPECT_GE(c.top[i][0].logprob, c.top[i][1].logprob);
    EXPECT_GE(c.top[i][1].logprob, c.top[i][2].logprob);
    ctx.push_back(t);
  }
}

TEST(EngineFake, SeededSamplingIndependentOfBatch) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 128;
  const SamplingParams p = seeded_top_k(1.5f, 20, 1234, 40);
  std::vector<int32_t> prompt{5, 6, 7};
  Harness solo(cfg);
  uint64_t s = solo.add(prompt, p).request_id;
  solo.run();
  Harness crowd(cfg);
  std::mt19937 rng(3);
  for (int i = 0; i < 5; ++i) {
    SamplingParams o = p;
    o.seed.reset();
    crowd.add(random_prompt(rng, 9), o);
  }
  uint64_t c = crowd.add(prompt, p).request_id;
  for (int i = 0; i < 5; ++i) crowd.add(random_prompt(rng, 3), greedy(7));
  crowd.run();
  EXPECT_EQ(solo.results[s].tokens, crowd.results[c].tokens);
  // Sampling at this temperature really departs from greedy.
  EXPECT_NE(solo.results[s].tokens, reference_generate(prompt, 40, kVocab, -1));
}

// EngineConfig::seed (serve --seed): requests without a seed sample the same tokens in two engines with the same
// engine seed, and other tokens under another one.
TEST(EngineFake, EngineSeedReproducesUnseededRequests) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 128;
  SamplingParams p = seeded_top_k(1.5f, 20, 0, 40);
  p.seed.reset();
  const std::vector<int32_t> prompt{5, 6, 7};
  auto sample = [&](uint64_t engine_seed) {
    EngineConfig c = cfg;
    c.seed = engine_seed;
    Harness h(c);
    const uint64_t a = h.add(prompt, p).request_id, b = h.add(prompt, p).request_id;
    h.run();
    return std::make_pair(h.results[a].tokens, h.results[b].tokens);
  };
  const auto first = sample(42), again = sample(42), other = sample(43);
  EXPECT_EQ(first, again);
  EXPECT_NE(first.first, first.second) << "two requests draw different seeds from the engine's stream";
  EXPECT_NE(first, other);
}

TEST(EngineFake, ForwardFailureFailsOnlyThatStep) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  Harness h(cfg);
  h.runner->fail_at_call = 3;
  uint64_t a = h.add({3, 4}, greedy(10)).request_id;
  h.run();
  EXPECT_EQ(h.results[a].reason, FinishReason::kError);
  EXPECT_NE(h.results[a].error.find("injected"), std::string::npos);
  EXPECT_EQ(h.engine->stats().free_blocks, h.engine->stats().num_blocks);
  Load l = make_load(1, 4, 10, 10);
  run_and_check(h, l);  // the engine keeps serving
}

TEST(EngineFake, BackgroundThreadConcurrentClients) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 96;
  cfg.kv_cache_memory = 40 * 32;
  Harness h(cfg);
  h.engine->start();
  Load l = make_load(21, 40, 30, 30);
  std::vector<uint64_t> ids(l.prompts.size());
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < l.prompts.size(); i += 4)
        ids[i] = h.add(l.prompts[i], greedy(l.max_tokens[i])).request_id;
    });
  for (auto& c : clients) c.join();
  for (int i = 0; i < 20000 && h.engine->has_unfinished(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(h.engine->has_unfinished());
  h.engine->stop();
  std::lock_guard<std::mutex> lk(h.mu);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(h.results[ids[i]].tokens, reference_generate(l.prompts[i], l.max_tokens[i], kVocab, kEos));
}

TEST(EngineFake, StopAbortsPending) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 96;
  Harness h(cfg);
  SamplingParams p = greedy(90);
  p.ignore_eos = true;
  uint64_t a = h.add({3}, p).request_id;
  h.engine->step();
  uint64_t b = h.add({4}, p).request_id;
  h.engine->stop();
  EXPECT_EQ(h.results[a].reason, FinishReason::kAbort);
  EXPECT_EQ(h.results[b].reason, FinishReason::kAbort);
  EXPECT_FALSE(h.engine->has_unfinished());
  EXPECT_EQ(h.engine->stats().free_blocks, h.engine->stats().num_blocks);
}

TEST(EngineFake, PriorityPolicyServesLowValueFirst) {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 1;
  cfg.policy = SchedulingPolicy::kPriority;
  Harness h(cfg);
  std::vector<uint64_t> order;
  std::vector<uint64_t> ids;
  for (int prio : {5, 1, 3}) {
    RequestSpec spec;
    spec.prompt = {3, 4};
    spec.params = greedy(3);
    spec.params.ignore_eos = true;
    spec.priority = prio;
    ids.push_back(h.engine->add_request(spec, [&](const RequestOutput& o) {
      if (o.finished) order.push_back(o.request_id);
    }).request_id);
  }
  h.run();
  EXPECT_EQ(order, (std::vector<uint64_t>{ids[1], ids[2], ids[0]}));
}

// queue_seconds: set in every output of a request (the same value), and bounded by what the caller can see: with
// one sequence at a time, request k is scheduled only after request k-1's final output, and before its own first
// output. With ta / tb the clock just before / after add_request (added_at lies between them):
//   t_final[k-1] - tb[k] <= queue_seconds[k] <= t_first[k] - ta[k].
TEST(EngineFake, QueueSecondsIsTheWaitBeforeFirstScheduled) {
  using Clock = std::chrono::steady_clock;
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 1;
  Harness h(cfg);
  struct Seen {
    std::vector<double> queue;
    Clock::time_point ta, tb, first, final;
  };
  std::map<uint64_t, Seen> seen;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    RequestSpec spec;
    spec.prompt = {3, 4, 5};
    spec.params = greedy(4);
    spec.params.ignore_eos = true;
    const Clock::time_point ta = Clock::now();
    const uint64_t id = h.engine->add_request(spec, [&](const RequestOutput& o) {
      Seen& s = seen[o.request_id];
      if (s.queue.empty()) s.first = Clock::now();
      if (o.finished) s.final = Clock::now();
      s.queue.push_back(o.queue_seconds);
    }).request_id;
    seen[id].ta = ta;
    seen[id].tb = Clock::now();
    ids.push_back(id);
  }
  h.run();
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  for (size_t k = 0; k < ids.size(); ++k) {
    const Seen& s = seen[ids[k]];
    ASSERT_FALSE(s.queue.empty());
    for (double v : s.queue) EXPECT_EQ(v, s.queue.front()) << "request " << k;
    EXPECT_GE(s.queue.front(), 0.0) << "request " << k;
    EXPECT_LE(s.queue.front(), secs(s.first - s.ta)) << "request " << k;
    if (k > 0) EXPECT_GE(s.queue.front(), secs(seen[ids[k - 1]].final - s.tb)) << "request " << k;
  }
}

}  // namespace
}  // namespace mopt::test
