// Test harness: an Engine over a FakeRunner, with outputs collected per request.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "unit/engine/fake_runner.h"

namespace mopt::test {

constexpr int kVocab = 64;
constexpr int32_t kEos = 1;

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  std::string text;
  bool finished = false;
  int n_outputs = 0;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  bool grammar_dead_end = false;
  int cached_prompt_tokens = 0;
  int completion_tokens = 0;
};

class Harness {
 public:
  // tok: a tokenizer of kVocab tokens whose eos is kEos, or null (no text, no stop strings, no grammars).
  // draft: SpecMethod::kDraftModel's proposer (cfg.speculative.model then only needs to be non-empty).
  explicit Harness(const EngineConfig& cfg, uint64_t kv_memory = 1 << 20, const Tokenizer* tok = nullptr,
                   std::unique_ptr<DraftModel> draft = nullptr) {
    set_log_level(LogLevel::kWarn);
    auto r = std::make_unique<FakeRunner>(kVocab, 4096, kv_memory);
    runner = r.get();
    auto e = create_engine_with_runner(std::move(r), tok, cfg, {kEos}, std::move(draft));
    if (!e) {
      create_error = e.message();
      runner = nullptr;
      return;
    }
    engine = std::move(e).value();
  }

  // The engine's stop() reports aborts through on_output: stop it while `results` still exists.
  ~Harness() {
    if (engine) engine->stop();
  }

  AddResult add(std::vector<int32_t> prompt, SamplingParams p, int priority = 0, std::string salt = {},
                std::shared_ptr<grammar::CompiledGrammar> grammar = nullptr) {
    RequestSpec spec;
    spec.prompt = std::move(prompt);
    spec.params = std::move(p);
    spec.priority = priority;
    spec.cache_salt = std::move(salt);
    spec.grammar = std::move(grammar);
    return engine->add_request(std::move(spec), [this](const RequestOutput& o) { on_output(o); });
  }

  void on_output(const RequestOutput& o) {
    std::lock_guard<std::mutex> lk(mu);
    Collected& c = results[o.request_id];
    EXPECT_FALSE(c.finished) << "output after finish for request " << o.request_id;
    c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    c.logprobs.insert(c.logprobs.end(), o.token_logprobs.begin(), o.token_logprobs.end());
    c.top.insert(c.top.end(), o.top_logprobs.begin(), o.top_logprobs.end());
    c.text += o.text;
    ++c.n_outputs;
    c.finished = o.finished;
    c.reason = o.finish_reason;
    c.error = o.error;
    c.grammar_dead_end = o.grammar_dead_end;
    c.cached_prompt_tokens = o.cached_prompt_tokens;
    c.completion_tokens = o.completion_tokens;
  }

  // Steps until no request is left, checking the engine invariants after every step.
  void run(int max_steps = 1000000) {
    int steps = 0;
    while (engine->has_unfinished()) {
      engine->step();
      std::string inv = check_engine_invariants(*engine);
      ASSERT_EQ(inv, "") << "after step " << steps;
      ASSERT_LT(++steps, max_steps) << "no forward progress";
    }
  }

  FakeRunner* runner = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine;
  std::string create_error;
  std::mutex mu;
  std::map<uint64_t, Collected> results;
};

// A prompt of `len` random ids in [2, kVocab) (never EOS).
template <class Rng>
std::vector<int32_t> random_prompt(Rng& rng, int len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = 2 + static_cast<int32_t>(rng() % (kVocab - 2));
  return p;
}

// Seeded top-k sampling of exactly max_tokens tokens (ignore_eos).
inline SamplingParams seeded_top_k(float temperature, int top_k, uint64_t seed, int max_tokens) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace mopt::test
