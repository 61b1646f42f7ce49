// Engine tests on a real model (stories260K, GGUF) through the real CPU runner and tokenizer.
// The oracle for batching, chunked prefill, preemption and prefix caching is the same engine serving each request
// alone with a roomy cache; the golden text is the greedy story published with llama2.c (doc/stories260K.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine/engine_outputs.h"

namespace mopt {
namespace {

std::string models_dir() {
  const char* e = std::getenv("MOPT_MODELS_DIR");
  return e ? e : MOPT_MODELS_DIR;
}

const char* kGolden =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.";

class EngineModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_log_level(LogLevel::kWarn);
    auto m = load_model(models_dir() + "/stories260K.gguf");
    if (!m) {
      load_error_ = m.message();
      return;
    }
    model_ = std::move(m).value().release();
    auto t = Tokenizer::create(model_->vocab);
    ASSERT_TRUE(t) << t.message();
    tok_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete solo_engine_;
    solo_engine_ = nullptr;
    solo_cache_.clear();
    delete tok_;
    delete model_;
    tok_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    // The shared models are part of the test setup: a missing one is a failure, not a skip.
    ASSERT_NE(model_, nullptr) << "stories260K.gguf: " << load_error_ << " (set MOPT_MODELS_DIR)";
  }

  static EngineConfig base_config() {
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.max_model_len = 256;
    cfg.kv_cache_memory = 32ull << 20;
    cfg.runner.n_threads = 1;  // the 2-core CI machine runs other tests alongside
    cfg.runner.device = DeviceKind::kCpu;  // these tests are about the CPU runner (default: auto)
    return cfg;
  }

  using Out = test::EngineRunOutput;

  // Runs all specs at once; returns the outputs in order.
  static std::vector<Out> run(const EngineConfig& cfg, const std::vector<RequestSpec>& specs,
                              EngineStats* stats = nullptr) {
    return test::run_to_completion(*model_, *tok_, cfg, specs, stats);
  }

  // Mixed prompts (story openings, cut at various lengths) and output lengths.
  static std::vector<RequestSpec> mixed_load(int n, uint32_t seed) {
    static const char* openings[] = {"Once upon a time", "One day, a little boy named Tim", "The cat sat on the",
                                     "Lily and her mom went to the park. They saw a big tree and",
                                     "There was a dog who liked to run", "Sam had a red ball"};
    std::mt19937 rng(seed);
    std::vector<RequestSpec> specs;
    for (int i = 0; i < n; ++i) {
      RequestSpec s;
      s.prompt = tok_->encode(openings[rng() % 6], true, false);
      s.prompt.resize(1 + rng() % s.prompt.size());  // keeps BOS
      s.params.temperature = 0;
      s.params.max_tokens = 1 + static_cast<int>(rng() % 60);
      specs.push_back(s);
    }
    return specs;
  }

  // The oracle: each request served alone (one at a time through one engine with a roomy cache and no prefix
  // caching), memoized by prompt and max_tokens.
  static Out solo(const RequestSpec& spec) {
    auto key = std::make_pair(spec.prompt, spec.params.max_tokens);
    auto it = solo_cache_.find(key);
    if (it != solo_cache_.end()) return it->second;
    if (!solo_engine_) {
      EngineConfig cfg = base_config();
      cfg.enable_prefix_caching = false;
      auto e = Engine::create(*model_, *tok_, cfg);
      EXPECT_TRUE(e) << e.message();
      solo_engine_ = std::move(e).value().release();
    }
    Out out;
    AddResult r = solo_engine_->add_request(spec, [&](const RequestOutput& o) {
      out.tokens.insert(out.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      out.text += o.text;
      if (o.finished) out.reason = o.finish_reason;
    });
    EXPECT_EQ(r.error, AddError::kNone) << r.message;
    while (solo_engine_->has_unfinished()) solo_engine_->step();
    solo_cache_[key] = out;
    return out;
  }

  static void expect_same_as_solo(const std::vector<RequestSpec>& specs, const std::vector<Out>& got) {
    ASSERT_EQ(got.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      Out ref = solo(specs[i]);
      EXPECT_EQ(got[i].tokens, ref.tokens) << "request " << i;
      EXPECT_EQ(got[i].text, ref.text) << "request " << i;
      EXPECT_EQ(got[i].reason, ref.reason) << "request " << i;
    }
  }

  static inline Engine* solo_engine_ = nullptr;
  static inline std::map<std::pair<std::vector<int32_t>, int>, Out> solo_cache_;
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
  static inline std::string load_error_;
};

TEST_F(EngineModel, GreedyGoldenStory) {
  RequestSpec s;
  s.prompt = {tok_->bos()};
  s.params.temperature = 0;
  s.params.max_tokens = 48;
  auto out = run(base_config(), {s});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_GT(out[0].text.size(), 60u);
  EXPECT_EQ(std::string(kGolden).substr(0, out[0].text.size()), out[0].text);
  EXPECT_EQ(out[0].reason, FinishReason::kLength);
}

// Blocks of 16 and the CPU runner's default (--block-size 0: 64); the solo runs use 16.
TEST_F(EngineModel, ConcurrentEqualsSolo) {
  for (int bs : {16, 0})
    for (int n : {1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 48, 63, 64}) {
      SCOPED_TRACE(testing::Message() << n << " requests, block size " << bs);
      auto specs = mixed_load(n, static_cast<uint32_t>(n));
      EngineConfig cfg = base_config();
      cfg.block_size = bs;
      auto got = run(cfg, specs);
      expect_same_as_solo(specs, got);
    }
}

TEST_F(EngineModel, BlockSizeZeroIsTheCpuRunnersDefault) {
  EngineConfig cfg = base_config();
  cfg.block_size = 0;
  auto e = Engine::create(*model_, *tok_, cfg);
  ASSERT_TRUE(e) << e.message();
  EXPECT_EQ((*e)->config().block_size, 64);
  EXPECT_EQ((*e)->stats().block_size, 64);
}

TEST_F(EngineModel, ChunkedPrefillForcedSmall) {
  auto specs = mixed_load(24, 77);
  EngineConfig cfg = base_config();
  cfg.max_num_batched_tokens = 5;
  cfg.block_size = 4;
  auto got = run(cfg, specs);
  expect_same_as_solo(specs, got);
}


TEST_F(EngineModel, TinyPoolPreemptionRecomputeAndSwap) {
  auto specs = mixed_load(32, 5);
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    SCOPED_TRACE(mode == PreemptionMode::kSwap ? "swap" : "recompute");
    EngineConfig cfg = base_config();
    cfg.block_size = 8;
    cfg.max_model_len = 96;
    const uint64_t per_token = model_->config.kv_bytes_per_token(2);  // the CPU default KV cache: fp16
    cfg.kv_cache_memory = 14ull * 8 * per_token;                      // 14 blocks of 8 tokens
    cfg.preemption = mode;
    if (mode == PreemptionMode::kSwap) cfg.swap_space_gib = 64.0 * 8 * static_cast<double>(per_token) / 1073741824.0;
    EngineStats st;
    auto got = run(cfg, specs, &st);
    EXPECT_EQ(st.num_blocks, 14);
    EXPECT_GT(st.preemptions, 0u);
    EXPECT_EQ(st.free_blocks, st.num_blocks);
    expect_same_as_solo(specs, got);
  }
}

TEST_F(EngineModel, PrefixCachingMatchesColdRun) {
  const std::string shared =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day,";
  std::vector<RequestSpec> specs;
  for (const char* tail : {" she saw", " her mom", " a bird", " they went", " Tom", " the sun"}) {
    RequestSpec s;
    s.prompt = tok_->encode(shared + tail, true, false);
    s.params.temperature = 0;
    s.params.max_tokens = 24;
    specs.push_back(s);
  }
  EngineConfig warm = base_config();
  warm.block_size = 8;
  EngineConfig cold = warm;
  cold.enable_prefix_caching = false;
  // Warm: the first request alone, then all of them (the cache persists within the engine).
  auto e = Engine::create(*model_, *tok_, warm);
  ASSERT_TRUE(e) << e.message();
  std::map<uint64_t, Out> outs;
  auto cb = [&](const RequestOutput& o) {
    outs[o.request_id].tokens.insert(outs[o.request_id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    outs[o.request_id].cached = o.cached_prompt_tokens;
  };
  (*e)->add_request(specs[0], cb);
  while ((*e)->has_unfinished()) (*e)->step();
  for (size_t i = 1; i < specs.size(); ++i) (*e)->add_request(specs[i], cb);
  while ((*e)->has_unfinished()) (*e)->step();
  EngineStats st = (*e)->stats();
  auto cold_out = run(cold, specs);
  ASSERT_EQ(outs.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(outs[i + 1].tokens, cold_out[i].tokens) << "request " << i;
    if (i > 0) {
      EXPECT_GE(outs[i + 1].cached, 16) << "request " << i;
    }
  }
  EXPECT_GT(st.prefix_cache_hits, 0u);
  std::printf("[ prefix cache ] stories260K: hits %llu / queries %llu prompt tokens = %.1f%%\n",
              static_cast<unsigned long long>(st.prefix_cache_hits),
              static_cast<unsigned long long>(st.prefix_cache_queries),
              100.0 * static_cast<double>(st.prefix_cache_hits) / static_cast<double>(st.prefix_cache_queries));
}

TEST_F(EngineModel, StreamedTextContinuesThePrompt) {
  // The streamed text deltas of a continuation are exactly the decoded (prompt + output) minus the decoded prompt.
  for (const char* text : {"The cat sat", "Lily went to the park", "Once upon a time"}) {
    RequestSpec s;
    s.prompt = tok_->encode(text, true, false);
    s.params.temperature = 0;
    s.params.max_tokens = 30;
    s.params.ignore_eos = true;
    auto out = run(base_config(), {s});
    ASSERT_EQ(out.size(), 1u);
    std::vector<int32_t> all = s.prompt;
    all.insert(all.end(), out[0].tokens.begin(), out[0].tokens.end());
    EXPECT_EQ(tok_->decode(s.prompt) + out[0].text, tok_->decode(all)) << text;
  }
}

TEST_F(EngineModel, StopStringsCutTheText) {
  RequestSpec s;
  s.prompt = {tok_->bos()};
  s.params.temperature = 0;
  s.params.max_tokens = 48;
  s.params.stop = {"Lily"};
  auto out = run(base_config(), {s});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, FinishReason::kStop);
  EXPECT_EQ(out[0].text, "Once upon a time, there was a little girl named ");
  // Held-back text: a stop string that never completes does not lose text.
  s.params.stop = {"park!"};
  s.params.max_tokens = 30;
  auto full = run(base_config(), {s});
  RequestSpec plain = s;
  plain.params.stop.clear();
  auto ref = run(base_config(), {plain});
  EXPECT_EQ(full[0].text, ref[0].text);
  EXPECT_EQ(full[0].reason, FinishReason::kLength);
}

TEST_F(EngineModel, CreateLogsAndValidates) {
  EngineConfig cfg = base_config();
  cfg.max_model_len = 4096;  // the model's context is 2048
  auto e = Engine::create(*model_, *tok_, cfg);
  ASSERT_FALSE(e);
  EXPECT_NE(e.message().find("context length"), std::string::npos) << e.message();
  cfg = base_config();
  cfg.kv_cache_memory = 0;
  cfg.gpu_memory_utilization = 0.01;
  auto e2 = Engine::create(*model_, *tok_, cfg);
  ASSERT_TRUE(e2) << e2.message();
  EXPECT_GE((*e2)->stats().num_blocks, 16);
  EXPECT_EQ((*e2)->config().max_model_len, 256);
}

// --device auto (the default of RunnerOptions): the engine reports the device it resolved to, the one
// resolve_device() picks (cuda only where a GPU is usable), and generates the same greedy story.
TEST_F(EngineModel, DeviceAutoResolves) {
  EXPECT_EQ(RunnerOptions{}.device, DeviceKind::kAuto);
  EXPECT_EQ(resolve_device(DeviceKind::kCpu), DeviceKind::kCpu);
  EXPECT_EQ(resolve_device(DeviceKind::kCuda), DeviceKind::kCuda);
  const DeviceKind want = cuda_device_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
  EXPECT_EQ(resolve_device(DeviceKind::kAuto), want);
  if (want != DeviceKind::kCpu) GTEST_SKIP() << "a GPU is usable here: the rest checks the CPU fallback";
  EngineConfig cfg = base_config();
  cfg.runner.device = DeviceKind::kAuto;
  RequestSpec spec;
  spec.prompt = tok_->encode("", true, false);
  spec.params.temperature = 0;
  spec.params.max_tokens = 40;
  EngineStats st;
  std::vector<Out> out = run(cfg, {spec}, &st);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text.substr(0, 60), std::string(kGolden).substr(0, 60));
  auto e = Engine::create(*model_, *tok_, cfg);
  ASSERT_TRUE(e) << e.message();
  EXPECT_EQ((*e)->config().runner.device, DeviceKind::kCpu);
}

}  // namespace
}  // namespace mopt
