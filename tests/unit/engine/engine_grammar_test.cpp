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

// With a device sampler that applies token masks, constrained rows stay on the device too: no logits are fetched,
// every output follows the grammar, and greedy constrained outputs equal the host sampler's (mode 0 vs mode 1).
TEST(EngineGrammar, MaskedRowsOnTheDeviceWhenItTakesMasks) {
  auto tok = small_tokenizer();
  ASSERT_TRUE(tok);
  auto g = compile(*tok, R"(root ::= "{" [a-c]{1,3} ("," [0-9]{1,2})? "}")");
  ASSERT_TRUE(g);
  std::vector<std::vector<std::string>> texts(2);
  for (int mode = 0; mode < 2; ++mode) {  // 0: host sampler (device without masks)   1: device masks
    SCOPED_TRACE(testing::Message() << "mode " << mode);
    Harness h(config(), 1 << 20, tok.get());
    ASSERT_TRUE(h.engine) << h.create_error;
    h.runner->device_sampling = true;
    h.runner->device_masks = mode == 1;
    std::mt19937 rng(9);
    std::vector<uint64_t> greedy_ids, drawn_ids;
    for (int i = 0; i < 8; ++i) {
      greedy_ids.push_back(h.add(random_prompt(rng, 4 + i), greedy(20), 0, {}, g).request_id);
      SamplingParams p = greedy(20);
      p.temperature = 1.0f;
      p.top_k = i % 3 == 0 ? 0 : 5;
      p.seed = 300 + i;
      drawn_ids.push_back(h.add(random_prompt(rng, 3 + i), p, 0, {}, g).request_id);
    }
    h.run();
    const std::regex shape(R"(\{[a-c]{1,3}(,[0-9]{1,2})?\})");
    uint64_t tokens = 0;
    for (const auto* ids : {&greedy_ids, &drawn_ids})
      for (uint64_t id : *ids) {
        const Collected& c = h.results[id];
        ASSERT_TRUE(c.finished);
        EXPECT_EQ(c.reason, FinishReason::kStop) << c.error;
        EXPECT_TRUE(std::regex_match(c.text, shape)) << c.text;
        tokens += c.tokens.size();
      }
    for (uint64_t id : greedy_ids) texts[static_cast<size_t>(mode)].push_back(h.results[id].text);
    // Mode 0: every row of a step is constrained, so the steps are plain forward passes sampled on the host.
    EXPECT_EQ(h.runner->host_rows_fetched, 0u);
    EXPECT_EQ(h.runner->masked_rows_sampled, mode == 1 ? tokens : 0u);
  }
  EXPECT_EQ(texts[0], texts[1]);
}

// How constrained requests end, the same whether their rows are sampled on the host (no device sampler, or one
// without token masks) or by a device sampler that applies the masks (the engine stages each row's mask less the
// ids banned by ignore_eos / not-yet-accepting stop ids, and leaves rows with nothing to draw to the host).
TEST(EngineGrammar, HowConstrainedRequestsEnd) {
  auto tok = small_tokenizer();
  ASSERT_TRUE(tok);
  for (int mode = 0; mode < 3; ++mode) {  // 0: host only   1: device sampler, no masks   2: device masks
    SCOPED_TRACE(testing::Message() << "mode " << mode);
    Harness h(config(), 1 << 20, tok.get());
    ASSERT_TRUE(h.engine) << h.create_error;
    h.runner->device_sampling = mode >= 1;
    h.runner->device_masks = mode == 2;
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
    // a stop id inside the mask is drawn only where the text may end: never here before "xyz" is complete
    SamplingParams st = greedy(30);
    st.stop_token_ids = {tok->encode("b", false, false).at(0)};
    uint64_t stop = h.add({11}, st, 0, {}, compile(*tok, R"(root ::= [b]{0,2} "xyz" "b"?)")).request_id;
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
    EXPECT_EQ(h.results[stop].text.substr(0, 3), "xyz") << h.results[stop].text;
    EXPECT_EQ(h.results[stop].reason, FinishReason::kStop) << h.results[stop].error;
    EXPECT_EQ(h.runner->masked_rows_sampled > 0, mode == 2);
    EngineStats s = h.engine->stats();
    EXPECT_EQ(s.free_blocks, s.num_blocks);
  }
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
  ASSERT_TRUE(m) << m.message() << " (set MOPT_MODELS_DIR)";  // a missing shared model is a failure, not a skip
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
