// End-to-end correctness against independent references:
//  - stories260K greedy output from BOS = the text published with llama2.c (GGUF and llama2.c formats);
//  - code-qwen2-25m greedy continuations, top-5 logits and perplexity = Hugging Face transformers (fp32).
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_runner.h"
#include "model_util.h"
#include "seq_driver.h"
#include "tokenizer/tokenizer.h"

namespace mopt::test {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The fenced block after "Reference output, greedy" in the models README.
std::string published_stories_text() {
  const std::string readme = slurp(models_dir() + "/README.md");
  size_t at = readme.find("Reference output, greedy");
  EXPECT_NE(at, std::string::npos);
  size_t open = readme.find("```\n", at);
  size_t close = readme.find("\n```", open + 4);
  EXPECT_NE(close, std::string::npos);
  return readme.substr(open + 4, close - open - 4);
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<CpuRunner> runner;
};

Loaded load(const std::string& path, KvCacheDtype kv = KvCacheDtype::kFloat32) {
  Loaded l;
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m) return l;
  l.model = std::move(m).value();
  auto t = Tokenizer::create(l.model->vocab);
  EXPECT_TRUE(t.is_ok()) << t.message();
  if (t) l.tok = std::move(t).value();
  RunnerOptions ro;
  ro.n_threads = 2;
  ro.kv_cache_dtype = kv;
  auto r = CpuRunner::create(*l.model, ro);
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (r) l.runner = std::move(r).value();
  if (l.runner) { EXPECT_TRUE(l.runner->init_kv_cache(256, 16, 0).is_ok()); }
  return l;
}

// Greedy continuation of `prompt` for n tokens (stops early at an end-of-generation id if stop_at_eog).
std::vector<int32_t> greedy(Loaded& l, const std::vector<int32_t>& prompt, int n, bool stop_at_eog) {
  SeqDriver drv(*l.runner, 256, 16, 42);
  const int s = drv.add_sequence();
  const int V = l.model->config.n_vocab;
  auto logits = drv.feed(s, prompt);
  std::vector<int32_t> out;
  int next = argmax(&logits[(prompt.size() - 1) * V], V);
  for (int i = 0; i < n; ++i) {
    out.push_back(next);
    if (stop_at_eog && l.tok->is_eog(next)) break;
    logits = drv.feed(s, {next});
    next = argmax(logits.data(), V);
  }
  return out;
}

void check_stories(const std::string& path, KvCacheDtype kv = KvCacheDtype::kFloat32) {
  Loaded l = load(models_dir() + path, kv);
  ASSERT_TRUE(l.runner && l.tok);
  const std::string want = published_stories_text();
  ASSERT_GT(want.size(), 400u);
  const auto ids = greedy(l, {l.tok->bos()}, 400, false);
  StreamDecoder dec(*l.tok);
  std::string got;
  for (int32_t id : ids) {
    got += dec.push(id);
    if (got.size() >= want.size()) break;
  }
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(got.substr(0, want.size()), want);
  // Token for token: the published text re-tokenized gives the generated ids.
  auto want_ids = l.tok->encode(want, false, false);
  ASSERT_LE(want_ids.size(), ids.size());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(want_ids.size())), want_ids);
}

TEST(Golden, Stories260KGgufGreedyMatchesPublishedText) { check_stories("/stories260K.gguf"); }
TEST(Golden, Stories260KLlama2cGreedyMatchesPublishedText) { check_stories("/stories260K.bin"); }
// The fp16 KV cache (--kv-cache-dtype fp16) keeps the published greedy text.
TEST(Golden, Stories260KGreedyWithFp16KvMatchesPublishedText) {
  check_stories("/stories260K.gguf", KvCacheDtype::kFloat16);
}

nlohmann::json qwen_reference() {
  return nlohmann::json::parse(slurp(models_dir() + "/code-qwen2-25m.reference.json"));
}

void check_qwen_greedy(KvCacheDtype kv) {
  Loaded l = load(models_dir() + "/code-qwen2-25m", kv);
  ASSERT_TRUE(l.runner && l.tok);
  const auto ref = qwen_reference();
  ASSERT_EQ(ref["greedy"].size(), 4u);
  for (const auto& g : ref["greedy"]) {
    SCOPED_TRACE(g["prompt"].get<std::string>());
    const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(l.tok->encode(g["prompt"].get<std::string>(), false, false), prompt);
    const auto want = g["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(greedy(l, prompt, static_cast<int>(want.size()), false), want);
  }
}

TEST(Golden, CodeQwen2GreedyContinuationsMatchTransformers) { check_qwen_greedy(KvCacheDtype::kFloat32); }
TEST(Golden, CodeQwen2GreedyWithFp16KvMatchesTransformers) { check_qwen_greedy(KvCacheDtype::kFloat16); }

// Top-5 logits at every position of the four reference sequences: same ids (where the reference's own gaps are
// larger than the tolerance) and logits within 0.02 (transformers computes fp32 from the same bf16 weights).
TEST(Golden, CodeQwen2Top5LogitsMatchTransformers) {
  Loaded l = load(models_dir() + "/code-qwen2-25m");
  ASSERT_TRUE(l.runner);
  const auto ref = qwen_reference();
  const int V = l.model->config.n_vocab;
  const double tol = 0.02;
  double worst = 0;
  int positions = 0;
  for (const auto& t : ref["top5"]) {
    const auto ids = t["input_ids"].get<std::vector<int32_t>>();
    const auto top_ids = t["top5_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_logits = t["top5_logits"].get<std::vector<std::vector<double>>>();
    SeqDriver drv(*l.runner, 256, 16, 5);
    const auto logits = drv.feed(drv.add_sequence(), ids);
    ASSERT_EQ(top_ids.size(), ids.size());
    for (size_t p = 0; p < ids.size(); ++p, ++positions) {
      const float* row = &logits[p * V];
      for (int k = 0; k < 5; ++k) {
        worst = std::max(worst, std::fabs(row[top_ids[p][k]] - top_logits[p][k]));
        EXPECT_NEAR(row[top_ids[p][k]], top_logits[p][k], tol) << "position " << p << " rank " << k;
      }
      if (top_logits[p][0] - top_logits[p][1] > 2 * tol) {
        EXPECT_EQ(argmax(row, V), top_ids[p][0]) << "position " << p;
      }
    }
  }
  EXPECT_GT(positions, 250);
  std::printf("code-qwen2-25m top-5 logits: max |diff| %.5f over %d positions\n", worst, positions);
}

}  // namespace
}  // namespace mopt::test
