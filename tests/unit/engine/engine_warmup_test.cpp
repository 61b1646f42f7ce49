// Engine::warmup and the count of tuning that still happens afterwards (EngineStats::*_after_warmup, which the
// server exports in /metrics and logs): a fake runner that "tunes" every batch size it has not run before stands
// in for the CUDA runner, whose real tuning needs a GPU (tests/gpu and scripts/warmup_gpu.sh check that one).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "unit/engine/engine_harness.h"

namespace mopt::test {
namespace {

class TuningRunner final : public FakeRunner {
 public:
  TuningRunner() : FakeRunner(kVocab, 4096, 1 << 20) {}
  int warm_calls = 0;
  int warm_up_to = 0;  // batch sizes 1..warm_up_to are "tuned" by warmup()
  std::vector<int> step_tokens;  // tokens of every forward() call
  int* calls_out = nullptr;      // also counts forward() calls here (outlives a runner the engine drops)

  Result<WarmupReport> warmup(const WarmupProgress& progress) override {
    ++warm_calls;
    for (int n = 1; n <= warm_up_to; ++n) {
      if (progress) progress(n - 1, warm_up_to, "batch");
      seen_.insert(n);
      ++counters_.gemm_tunings;
    }
    WarmupReport r;
    r.eager_shapes = warm_up_to;
    r.plans_tuned = static_cast<uint64_t>(warm_up_to);
    return r;
  }
  TuningCounters tuning_counters() const override { return counters_; }
  Status forward(const ForwardBatch& b, float* logits) override {
    if (calls_out) ++*calls_out;
    step_tokens.push_back(b.n_tokens());
    if (seen_.insert(b.n_tokens()).second) {  // a new shape: tuned (and "captured") inside this step
      ++counters_.gemm_tunings;
      ++counters_.graph_captures;
    }
    return FakeRunner::forward(b, logits);
  }

 private:
  std::set<int> seen_;
  TuningCounters counters_;
};

struct WarmEngine {
  TuningRunner* runner = nullptr;
  std::unique_ptr<Engine> engine;
  explicit WarmEngine(int warm_up_to) {
    set_log_level(LogLevel::kError);  // the late-tuning warnings are expected here
    auto r = std::make_unique<TuningRunner>();
    r->warm_up_to = warm_up_to;
    runner = r.get();
    EngineConfig cfg;
    cfg.max_num_batched_tokens = 64;
    auto e = create_engine_with_runner(std::move(r), nullptr, cfg, {kEos});
    EXPECT_TRUE(e.is_ok()) << e.message();
    engine = std::move(e).value();
  }
  void generate(int prompt_len) {
    RequestSpec spec;
    for (int i = 0; i < prompt_len; ++i) spec.prompt.push_back(2 + i);
    spec.params.max_tokens = 3;
    spec.params.temperature = 0;
    spec.params.ignore_eos = true;
    ASSERT_EQ(engine->add_request(std::move(spec), [](const RequestOutput&) {}).error, AddError::kNone);
    while (engine->has_unfinished()) engine->step();
  }
};

TEST(EngineWarmup, CountsOnlyTheTuningAfterTheWarmup) {
  WarmEngine w(8);
  EXPECT_FALSE(w.engine->stats().warmed_up);
  int progress_calls = 0;
  auto rep = w.engine->warmup([&](int, int total, const std::string&) {
    ++progress_calls;
    EXPECT_EQ(total, 8);
  });
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->eager_shapes, 8);
  EXPECT_EQ(progress_calls, 8);
  EXPECT_EQ(w.runner->warm_calls, 1);
  EngineStats s = w.engine->stats();
  EXPECT_TRUE(s.warmed_up);
  EXPECT_EQ(s.tunings_after_warmup, 0u);  // the warm-up's own tuning is not "after"

  w.generate(4);  // steps of 4 tokens (prefill) and 1 token (decode): both warmed
  s = w.engine->stats();
  EXPECT_EQ(s.tunings_after_warmup, 0u);
  EXPECT_EQ(s.captures_after_warmup, 0u);

  w.generate(20);  // a 20-token prefill step: a shape the warm-up missed
  s = w.engine->stats();
  EXPECT_EQ(s.tunings_after_warmup, 1u);
  EXPECT_EQ(s.captures_after_warmup, 1u);
  w.generate(20);  // tuned once: not again
  EXPECT_EQ(w.engine->stats().tunings_after_warmup, 1u);
}

TEST(EngineWarmup, ServesOneRequestOfItsOwnThatUsersDoNotSee) {
  WarmEngine w(8);
  ASSERT_TRUE(w.engine->warmup({}).is_ok());
  // A 32-token prompt prefilled, then one decode step for the second token: the path a user's request takes.
  ASSERT_EQ(w.runner->step_tokens.size(), 2u);
  EXPECT_EQ(w.runner->step_tokens[0], 32);
  EXPECT_EQ(w.runner->step_tokens[1], 1);
  EngineStats s = w.engine->stats();
  EXPECT_EQ(s.steps, 0u);
  EXPECT_EQ(s.prompt_tokens, 0u);
  EXPECT_EQ(s.generation_tokens, 0u);
  EXPECT_EQ(s.requests_finished, 0u);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_FALSE(w.engine->has_unfinished());
  EXPECT_EQ(s.tunings_after_warmup, 0u) << "the 32-token shape it tuned was before ready";
  w.generate(32);  // that prefill shape is warm now
  EXPECT_EQ(w.engine->stats().tunings_after_warmup, 0u);
  EXPECT_EQ(w.engine->stats().requests_finished, 1u);
}

TEST(EngineWarmup, NoWarmRequestWhenTheRunnerWarmedNothing) {
  WarmEngine w(0);
  ASSERT_TRUE(w.engine->warmup({}).is_ok());
  EXPECT_TRUE(w.runner->step_tokens.empty()) << "a CPU-like runner starts serving at once";
}

TEST(EngineWarmup, WithoutWarmupNothingIsCountedAsLate) {
  WarmEngine w(0);
  w.generate(20);
  const EngineStats s = w.engine->stats();
  EXPECT_FALSE(s.warmed_up);
  EXPECT_EQ(s.tunings_after_warmup, 0u);  // no warm-up promised anything
}

TEST(EngineWarmup, RefusedAfterTheFirstRequest) {
  WarmEngine w(4);
  w.generate(3);
  auto rep = w.engine->warmup({});
  ASSERT_FALSE(rep.is_ok());
  EXPECT_NE(rep.message().find("before"), std::string::npos) << rep.message();
  EXPECT_EQ(w.runner->warm_calls, 0);
}

// An engine over two TuningRunners, `target` and a draft model's `draft` (k = 3), for the tests below.
std::unique_ptr<Engine> engine_with_draft(std::unique_ptr<TuningRunner> target, std::unique_ptr<TuningRunner> draft) {
  EngineConfig cfg;
  cfg.max_num_batched_tokens = 64;
  cfg.speculative.method = SpecMethod::kDraftModel;
  cfg.speculative.num_speculative_tokens = 3;
  cfg.speculative.model = "fake draft";
  auto e = create_engine_with_runner(std::move(target), nullptr, cfg, {kEos},
                                     std::make_unique<DraftModel>(std::move(draft), nullptr));
  EXPECT_TRUE(e.is_ok()) << e.message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// A draft model's runner is warmed with the target's (its shapes in the report, its progress labelled), and its
// tuning after the warm-up counts as the target's does.
TEST(EngineWarmup, WarmsTheDraftModelsRunnerToo) {
  set_log_level(LogLevel::kError);  // the late-tuning warnings are expected here
  auto target = std::make_unique<TuningRunner>();
  target->warm_up_to = 40;  // every step shape of the target below
  TuningRunner* t = target.get();
  auto draft_runner = std::make_unique<TuningRunner>();
  draft_runner->warm_up_to = 2;  // the draft's one-token steps of one or two sequences, not its catch-up chunks
  TuningRunner* d = draft_runner.get();
  const std::unique_ptr<Engine> e = engine_with_draft(std::move(target), std::move(draft_runner));
  ASSERT_TRUE(e);
  Engine& eng = *e;
  int target_calls = 0, draft_calls = 0;
  auto rep = eng.warmup([&](int, int total, const std::string& what) {
    if (what.rfind("draft model: ", 0) == 0) {
      ++draft_calls;
      EXPECT_EQ(total, 2);
    } else {
      ++target_calls;
      EXPECT_EQ(total, 40);
    }
  });
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(t->warm_calls, 1);
  EXPECT_EQ(d->warm_calls, 1);
  EXPECT_EQ(target_calls, 40);
  EXPECT_EQ(draft_calls, 2);
  EXPECT_EQ(rep->eager_shapes, 42);
  EXPECT_EQ(rep->plans_tuned, 42u);
  EXPECT_EQ(eng.stats().tunings_after_warmup, 0u);

  // A 20-token prompt: the draft catches up with it in one chunk of a shape its warm-up left out (the warm
  // request's 32-token prompt was its first), and the target verifies up to 4 rows a step (warm).
  RequestSpec spec;
  for (int i = 0; i < 20; ++i) spec.prompt.push_back(2 + i);
  spec.params.max_tokens = 8;
  spec.params.temperature = 0;
  spec.params.ignore_eos = true;
  ASSERT_EQ(eng.add_request(std::move(spec), [](const RequestOutput&) {}).error, AddError::kNone);
  while (eng.has_unfinished()) eng.step();
  EXPECT_GT(eng.stats().spec_num_drafts, 0u);
  const uint64_t late = eng.stats().tunings_after_warmup;
  EXPECT_GE(late, 1u) << "the draft's 20-token chunk was tuned inside a step";
  EXPECT_EQ(eng.stats().captures_after_warmup, late);
}

// A draft whose forward pass fails is dropped (serving goes on without proposals) and its tuning counts stay in
// the engine's sums: nothing is counted as late tuning when they leave with it.
TEST(EngineWarmup, AFailedDraftLeavesTheCountersAlone) {
  set_log_level(LogLevel::kError);  // the draft's failure is logged once, as an error: expected here
  auto target = std::make_unique<TuningRunner>();
  target->warm_up_to = 40;
  auto draft_runner = std::make_unique<TuningRunner>();
  draft_runner->warm_up_to = 40;      // every shape it runs: its counts are the warm-up's
  draft_runner->fail_at_call = 3;     // its third forward pass fails
  int draft_calls = 0;                // the engine destroys the draft when it fails: count outside it
  draft_runner->calls_out = &draft_calls;
  const std::unique_ptr<Engine> e = engine_with_draft(std::move(target), std::move(draft_runner));
  ASSERT_TRUE(e);
  Engine& eng = *e;
  ASSERT_TRUE(eng.warmup({}).is_ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back(2 + i);
  RequestSpec spec;
  spec.prompt = prompt;
  spec.params = greedy(16);
  std::vector<int32_t> got;
  ASSERT_EQ(eng.add_request(std::move(spec), [&](const RequestOutput& o) {
    got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
  }).error, AddError::kNone);
  while (eng.has_unfinished()) eng.step();
  EXPECT_EQ(draft_calls, 3) << "the draft is not called after its failure";
  EXPECT_EQ(got, reference_generate(prompt, 16, kVocab, kEos));
  EXPECT_EQ(eng.stats().tunings_after_warmup, 0u);
  EXPECT_EQ(eng.stats().captures_after_warmup, 0u);
}

TEST(EngineWarmup, RunnerWithoutTuningReturnsAnEmptyReport) {
  // The base ModelRunner::warmup (the CPU runner's: it tunes and captures nothing) does no work.
  Harness h(EngineConfig{});
  ASSERT_TRUE(h.engine);
  auto rep = h.engine->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->eager_shapes, 0);
  EXPECT_EQ(rep->graphs, 0);
  EXPECT_EQ(h.runner->forward_calls, 0);
  EXPECT_TRUE(h.engine->stats().warmed_up);
}

}  // namespace
}  // namespace mopt::test
