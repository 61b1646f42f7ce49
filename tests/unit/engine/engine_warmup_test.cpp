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
