// --speculative-config: vLLM's JSON read into SpeculativeConfig; what mopt does not implement is refused clearly.
#include <gtest/gtest.h>

#include <string>

#include "core/rng.h"
#include "server/speculative_config.h"

namespace mopt {
namespace {

TEST(SpeculativeConfig, NgramFields) {
  auto c = parse_speculative_config(
      R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1})");
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->method, SpecMethod::kNgram);
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_max, 4);
  EXPECT_EQ(c->prompt_lookup_min, 1);
}

TEST(SpeculativeConfig, DisableByBatchSize) {
  auto c = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":4,"disable_by_batch_size":8})");
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->disable_by_batch_size, 8);
  auto d = parse_speculative_config(R"({"model":"d.gguf","num_speculative_tokens":3,"disable_by_batch_size":null})");
  ASSERT_TRUE(d) << d.message();
  EXPECT_EQ(d->disable_by_batch_size, 0);  // vLLM's default: never
}

TEST(SpeculativeConfig, LookupDefaultsAsVllm) {
  auto both = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":3})");
  ASSERT_TRUE(both) << both.message();
  EXPECT_EQ(both->prompt_lookup_min, 5);
  EXPECT_EQ(both->prompt_lookup_max, 5);
  auto max_only = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":7})");
  ASSERT_TRUE(max_only) << max_only.message();
  EXPECT_EQ(max_only->prompt_lookup_min, 7);
  auto min_only = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2})");
  ASSERT_TRUE(min_only) << min_only.message();
  EXPECT_EQ(min_only->prompt_lookup_max, 2);
}

// vLLM's draft-model forms: an explicit method, or a "model" alone.
TEST(SpeculativeConfig, DraftModelFields) {
  for (const char* json : {R"({"method":"draft_model","model":"d.gguf","num_speculative_tokens":3})",
                           R"({"model":"d.gguf","num_speculative_tokens":3})"}) {
    auto c = parse_speculative_config(json);
    ASSERT_TRUE(c) << json << ": " << c.message();
    EXPECT_EQ(c->method, SpecMethod::kDraftModel);
    EXPECT_EQ(c->model, "d.gguf");
    EXPECT_EQ(c->num_speculative_tokens, 3);
    EXPECT_EQ(c->prompt_lookup_max, 0);
    EXPECT_STREQ(spec_method_name(c->method), "draft_model");
  }
  // vLLM's draft_tensor_parallel_size: 1 is what mopt does (the draft unsharded).
  auto tp1 =
      parse_speculative_config(R"({"model":"d.gguf","num_speculative_tokens":3,"draft_tensor_parallel_size":1})");
  ASSERT_TRUE(tp1) << tp1.message();
  EXPECT_EQ(tp1->method, SpecMethod::kDraftModel);
}

// vLLM's older spelling of prompt lookup: "model": "ngram" or "[ngram]".
TEST(SpeculativeConfig, NgramAsAModelName) {
  for (const char* json : {R"({"model":"[ngram]","num_speculative_tokens":3,"prompt_lookup_max":4})",
                           R"({"model":"ngram","num_speculative_tokens":3})",
                           R"({"method":"ngram","model":"[ngram]","num_speculative_tokens":3})"}) {
    auto c = parse_speculative_config(json);
    ASSERT_TRUE(c) << json << ": " << c.message();
    EXPECT_EQ(c->method, SpecMethod::kNgram) << json;
    EXPECT_TRUE(c->model.empty()) << json;
  }
}

TEST(SpeculativeConfig, RefusesWhatIsNotImplementedOrWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"method":"draft_model","num_speculative_tokens":4})", "needs \"model\""},
      {R"({"method":"draft_model","model":"","num_speculative_tokens":4})", "needs \"model\""},
      {R"({"method":"draft_model","model":7,"num_speculative_tokens":4})", "needs \"model\""},
      {R"({"model":"d.gguf"})", "num_speculative_tokens"},
      {R"({"model":"d.gguf","num_speculative_tokens":4,"prompt_lookup_max":3})", "n-gram settings"},
      {R"({"method":"ngram","model":"d.gguf","num_speculative_tokens":4})", "takes none"},
      {R"({"model":"d.gguf","num_speculative_tokens":65})", "num_speculative_tokens must be in"},
      {R"({"method":"eagle","num_speculative_tokens":4})", "not implemented"},
      {R"({"method":"magic","num_speculative_tokens":4})", "unknown method"},
      {R"({"num_speculative_tokens":4})", "needs \"method\""},
      {R"({"method":"ngram"})", "num_speculative_tokens"},
      {R"({"method":"ngram","num_speculative_tokens":0})", "num_speculative_tokens must be in"},
      {R"({"method":"ngram","num_speculative_tokens":2.5})", "must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":1,"prompt_lookup_min":3})",
       "prompt_lookup_max must be in"},
      {R"({"method":"ngram","num_speculative_tokens":4,"quantization":"fp8"})", "not supported"},
      {R"({"method":"ngram","num_speculative_tokens":4,"disable_by_batch_size":0})", "must be >= 1"},
      {R"({"method":"ngram","num_speculative_tokens":4,"disable_by_batch_size":"8"})", "must be an integer"},
      {R"({"model":"d.gguf","num_speculative_tokens":4,"draft_tensor_parallel_size":2})", "unsharded"},
      {R"({"model":"d.gguf","num_speculative_tokens":4,"draft_tensor_parallel_size":"1"})", "must be an integer"},
      {R"({"method":"ngram","num_speculative_tokens":4,"draft_tensor_parallel_size":1})", "no second model"},
      {R"(["ngram"])", "JSON object"},
      {R"({"method":)", "not valid JSON"},
  };
  for (const auto& [json, needle] : cases) {
    auto c = parse_speculative_config(json);
    ASSERT_FALSE(c) << json;
    EXPECT_NE(c.message().find(needle), std::string::npos) << json << ": " << c.message();
  }
}

// Hostile configs: random edits of valid ones parse into a config the engine accepts, or are refused with a
// message that names --speculative-config; nothing else (ASan in CI).
TEST(SpeculativeConfig, MutatedConfigsParseValidOrAreRefused) {
  const std::string bases[] = {
      R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1})",
      R"({"method":"draft_model","model":"d.gguf","num_speculative_tokens":3})",
      R"({"model":"d.gguf","num_speculative_tokens":5})"};
  const char alphabet[] = "{}[]\",:0123456789-.eEmodelthngraftusp_\\\xff ";
  Xoshiro256 rng(0x51ECull);
  auto rnd = [&](uint64_t n) { return rng.next() % n; };
  int parsed = 0, refused = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string t = bases[rnd(3)];
    const int edits = 1 + static_cast<int>(rnd(3));
    for (int e = 0; e < edits && !t.empty(); ++e) {
      const size_t pos = rnd(t.size());
      switch (rnd(3)) {
        case 0: t.erase(pos, 1 + rnd(6)); break;
        case 1: t.insert(pos, 1, alphabet[rnd(sizeof alphabet - 1)]); break;
        default: t[pos] = alphabet[rnd(sizeof alphabet - 1)];
      }
    }
    auto c = parse_speculative_config(t);
    if (c) {
      ++parsed;
      EXPECT_EQ(validate_speculative_config(*c), "") << t;
      EXPECT_NE(c->method, SpecMethod::kNone) << t;
      EXPECT_EQ(c->method == SpecMethod::kDraftModel, !c->model.empty()) << t;
    } else {
      ++refused;
      EXPECT_NE(c.message().find("--speculative-config"), std::string::npos) << t << ": " << c.message();
    }
  }
  EXPECT_GT(parsed, 100);  // the edits are not all trivially refused (157 parse)
  EXPECT_GT(refused, 3000);
}

}  // namespace
}  // namespace mopt
