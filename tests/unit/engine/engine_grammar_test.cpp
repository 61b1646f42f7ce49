// Structured output in the engine: grammar-constrained requests batched with unconstrained ones, on the fake
// runner with device sampling (masked rows go to the host sampler, the others stay on the device path) and on the
// real stories260K model; how requests end (grammar complete, min_tokens, ignore_eos, a dead end).
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "engine/grammar/matcher.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine/engine_harness.h"
#include "unit/tokenizer/char_tokenizer.h"

namespace mopt::test {
namespace {

// A 64-token vocabulary for the fake runner: <unk>, </s> (= kEos), <s>, then single characters, and "~~" (the only
// token with '~').
std::unique_ptr<Tokenizer> small_tokenizer() {
  auto t = char_tokenizer("abcdefghijklmnopqrstuvwxyz{}[]\":,0123456789ABCDEFGHIJKLMNOPQ", {"~~"});
  EXPECT_TRUE(t && t->n_vocab() == kVocab && t->eos() == kEos);
  return t;
}

std::shared_ptr<grammar::CompiledGrammar> compile(const Tokenizer& tok, const std::string& gbnf) {
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, grammar::TokenVocab::from_tokenizer(tok, false));
  EXPECT_TRUE(g) << g.message();
  return g ? *g : nullptr;
}

EngineConfig config() {
  EngineConfig cfg;
  cfg.block_size = 4;
  cfg.max_model_len = 256;
  cfg.max_num_seqs = 16;
  cfg.max_num_batched_tokens = 64;
  return cfg;
}

TEST(EngineGrammar, MaskedRowsOnTheHostOthersOnTheDevice) {
  auto tok = small_tokenizer();
  ASSERT_TRUE(tok);
  auto g = compile(*tok, R"(root ::= "{" [a-c]{1,3} "}")");
  ASSERT_TRUE(g);
  Harness h(config(), 1 << 20, tok.get());
  ASSERT_TRUE(h.engine) << h.create_error;
  h.runner->device_sampling = true;
  std::mt19937 rng(5);
  std::vector<uint64_t> constrained, plain;
  std::vector<std::vector<int32_t>> plain_prompts;
  for (int i = 0; i < 6; ++i) {
    SamplingParams p = greedy(20);
    if (i % 2) {
      p.temperature = 1.0f;
      p.seed = 100 + i;
    }
    constrained.push_back(h.add(random_prompt(rng, 5), p, 0, {}, g).request_id);
    plain_prompts.push_back(random_prompt(rng, 5));
    plain.push_back(h.add(plain_prompts.back(), greedy(12)).request_id);
  }
  h.run();
  const std::regex shape(R"(\{[a-c]{1,3}\})");
  uint64_t constrained_tokens = 0;
  for (uint64_t id : constrained) {
    const Collected& c = h.results[id];
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.reason, FinishReason::kStop) << c.error;
    EXPECT_TRUE(std::regex_match(c.text, shape)) << c.text;
    constrained_tokens += c.tokens.size();
  }
  for (size_t i = 0; i < plain.size(); ++i)  // unconstrained requests are untouched by their neighbours' masks
    EXPECT_EQ(h.results[plain[i]].tokens, reference_generate(plain_prompts[i], 12, kVocab, kEos)) << i;
  // Only the constrained rows fetched logits (one row per constrained token); everything else was device-sampled.
  EXPECT_EQ(h.runner->host_rows_fetched, constrained_tokens);
}

TEST(EngineGrammar, HowConstrainedRequestsEnd) {
  auto tok = small_tokenizer();
  ASSERT_TRUE(tok);
  Harness h(config(), 1 << 20, tok.get());
  ASSERT_TRUE(h.engine) << h.create_error;
  // complete before min_tokens: the grammar wins (nothing may follow "ab")
  SamplingParams p = greedy(30);
  p.min_tokens = 10;
  uint64_t done = h.add({5, 6}, p, 0, {}, compile(*tok, R"(root ::= "ab")")).request_id;
  // ignore_eos: "a" may end or go on with "b"; end-of-generation is not drawn, so it goes on and completes
  SamplingParams q = greedy(30);
  q.ignore_eos = true;
  uint64_t on = h.add({7, 8}, q, 0, {}, compile(*tok, R"(root ::= "a" "b"?)")).request_id;
  // '~' is only in "~~": after "a" nothing can follow, a dead end reported as an error with the text kept (the
  // compile-time check by bytes cannot tell: vocab_check.h)
  uint64_t dead = h.add({9}, greedy(30), 0, {}, compile(*tok, R"(root ::= "a" "~")")).request_id;
  // max_tokens cuts a long grammar: finish_reason length
  uint64_t cut = h.add({10}, greedy(3), 0, {}, compile(*tok, R"(root ::= [a-z]{10})")).request_id;
  h.run();
  EXPECT_EQ(h.results[done].text, "ab");
  EXPECT_EQ(h.results[done].reason, FinishReason::kStop);
  EXPECT_EQ(h.results[on].text, "ab");
  EXPECT_EQ(h.results[on].reason, FinishReason::kStop);
  EXPECT_EQ(h.results[dead].text, "a");
  EXPECT_EQ(h.results[dead].reason, FinishReason::kError);
  EXPECT_TRUE(h.results[dead].grammar_dead_end);
  EXPECT_NE(h.results[dead].error.find("no token of the vocabulary continues"), std::string::npos);
  EXPECT_EQ(h.results[cut].reason, FinishReason::kLength);
  EXPECT_EQ(h.results[cut].text.size(), 3u);
  EngineStats s = h.engine->stats();
  EXPECT_EQ(s.free_blocks, s.num_blocks);
}

TEST(EngineGrammar, RejectsAGrammarOfAnotherVocabulary) {
  auto tok = small_tokenizer();
  ASSERT_TRUE(tok);
  Harness h(config(), 1 << 20, tok.get());
  ASSERT_TRUE(h.engine) << h.create_error;
  std::vector<std::string> bytes(10, "x");
  auto g = grammar::CompiledGrammar::from_gbnf("root ::= \"x\"", grammar::TokenVocab::build(bytes, {}));
  ASSERT_TRUE(g) << g.message();
  AddResult r = h.add({3}, greedy(4), 0, {}, *g);
  EXPECT_EQ(r.error, AddError::kInvalid);
  EXPECT_NE(r.message.find("vocabulary of 10 tokens"), std::string::npos) << r.message;
  SamplingParams raw = greedy(4);
  raw.skip_special_tokens = false;
  r = h.add({3}, raw, 0, {}, compile(*tok, "root ::= \"a\""));
  EXPECT_EQ(r.error, AddError::kInvalid);
}

TEST(EngineGrammar, StoriesModelSampledOutputsFollowTheGrammar) {
  const char* dir = std::getenv("MOPT_MODELS_DIR");
  auto m = load_model(std::string(dir ? dir : MOPT_MODELS_DIR) + "/stories260K.gguf");
  if (!m) GTEST_SKIP() << "stories260K.gguf not available: " << m.message();
  auto tok = Tokenizer::create((*m)->vocab);
  ASSERT_TRUE(tok) << tok.message();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.kv_cache_memory = 8 << 20;
  cfg.runner.device = DeviceKind::kCpu;
  cfg.runner.n_threads = 1;
  auto e = Engine::create(**m, **tok, cfg);
  ASSERT_TRUE(e) << e.message();
  auto g = grammar::CompiledGrammar::from_gbnf(
      R"(root ::= "{\"name\": \"" [A-Z] [a-z]{1,8} "\", \"age\": " [1-9] [0-9]? ", \"pets\": [" pet ("," " "? pet){0,3} "]}"
pet ::= "\"" ("cat" | "dog" | "bird") "\"")",
      grammar::TokenVocab::from_tokenizer(**tok, false));
  ASSERT_TRUE(g) << g.message();
  const std::regex shape(
      R"re(\{"name": "[A-Z][a-z]{1,8}", "age": [1-9][0-9]?, "pets": \[("(cat|dog|bird)"(, ?)?)+\]\})re");
  std::map<uint64_t, std::string> text;
  std::map<uint64_t, FinishReason> reason;
  std::mutex mu;
  auto cb = [&](const RequestOutput& o) {
    std::lock_guard<std::mutex> lk(mu);
    text[o.request_id] += o.text;
    if (o.finished) reason[o.request_id] = o.finish_reason;
  };
  const std::vector<int32_t> prompt = (*tok)->encode("Once upon a time", true, false);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 16; ++i) {
    RequestSpec spec;
    spec.prompt = prompt;
    spec.params.temperature = 1.0f;
    spec.params.seed = static_cast<uint64_t>(i);
    spec.params.max_tokens = 200;
    spec.grammar = *g;
    ids.push_back((*e)->add_request(std::move(spec), cb).request_id);
  }
  RequestSpec plain;
  plain.prompt = prompt;
  plain.params.temperature = 0;
  plain.params.max_tokens = 40;
  const uint64_t plain_id = (*e)->add_request(plain, cb).request_id;
  while ((*e)->step()) {
  }
  for (uint64_t id : ids) {
    EXPECT_EQ(reason[id], FinishReason::kStop) << text[id];
    EXPECT_TRUE(std::regex_match(text[id], shape)) << text[id];
  }
  // the unconstrained greedy request in the same batches: the published story
  EXPECT_EQ(text[plain_id].substr(0, 30), ", there was a little girl name");
}

}  // namespace
}  // namespace mopt::test
