// Speculative decoding, greedy: the output equals non-speculative greedy output token for token, on real models
// (stories260K GGUF, code-qwen2-25m HF folder) through the CPU runner, for one batch of mixed requests (copying
// prompts where n-gram proposals are accepted, stop strings, max_tokens, penalties, logprobs, min_tokens, a
// grammar), also with a step budget that cuts proposals short and a KV cache small enough to preempt, with n-gram
// proposals and with a draft model (an early exit of the target). The oracle is the same engine without
// --speculative-config.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "engine/kv_sizing.h"
#include "engine/grammar/matcher.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/engine/engine_outputs.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& rel) {
  set_log_level(LogLevel::kWarn);
  Loaded l;
  auto m = load_model(test::model_path(rel));
  EXPECT_TRUE(m) << rel << ": " << m.message() << " (set MOPT_MODELS_DIR)";
  if (!m) return l;
  l.model = std::move(m).value();
  auto t = Tokenizer::create(l.model->vocab);
  EXPECT_TRUE(t) << t.message();
  if (t) l.tok = std::move(t).value();
  return l;
}

using Out = test::EngineRunOutput;

EngineConfig base_config() {
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.max_model_len = 512;
  cfg.kv_cache_memory = 64ull << 20;
  cfg.runner.n_threads = 1;  // the 2-core CI machine runs other tests alongside
  cfg.runner.device = DeviceKind::kCpu;
  return cfg;
}

SpeculativeConfig ngram(int k, int n_min, int n_max) {
  SpeculativeConfig s;
  s.method = SpecMethod::kNgram;
  s.num_speculative_tokens = k;
  s.prompt_lookup_min = n_min;
  s.prompt_lookup_max = n_max;
  return s;
}

// A draft model with the target's tokenizer: the target's first n_layer layers, then its final norm and output
// (an early exit; self-speculative decoding). Its proposals are right often but not always.
SpeculativeConfig early_exit_draft(const std::string& rel, int n_layer, int k) {
  auto m = load_model(test::model_path(rel));
  EXPECT_TRUE(m) << m.message();
  SpeculativeConfig s;
  s.method = SpecMethod::kDraftModel;
  s.num_speculative_tokens = k;
  if (!m) return s;
  std::shared_ptr<Model> d = std::move(m).value();
  d->config.n_layer = n_layer;
  s.draft = d;
  return s;
}

std::vector<Out> run(const Loaded& l, const EngineConfig& cfg, const std::vector<RequestSpec>& specs,
                     EngineStats* stats) {
  return test::run_to_completion(*l.model, *l.tok, cfg, specs, stats);
}

RequestSpec greedy(const Tokenizer& tok, const std::string& prompt, int max_tokens, bool bos) {
  RequestSpec s;
  s.prompt = tok.encode(prompt, bos, false);
  s.params.temperature = 0;
  s.params.max_tokens = max_tokens;
  return s;
}

// Runs `specs` without speculation, then under each speculative config (and engine variant); every output must
// equal the plain one, and some proposals must have been accepted.
void expect_same_as_plain(const Loaded& l, const std::vector<RequestSpec>& specs,
                          const std::vector<EngineConfig>& variants) {
  EngineStats plain_stats;
  const std::vector<Out> want = run(l, base_config(), specs, &plain_stats);
  ASSERT_EQ(want.size(), specs.size());
  EXPECT_EQ(plain_stats.spec_num_drafts, 0u);
  for (size_t v = 0; v < variants.size(); ++v) {
    EngineStats st;
    const std::vector<Out> got = run(l, variants[v], specs, &st);
    ASSERT_EQ(got.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "variant " << v << ", request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "variant " << v << ", request " << i;
      EXPECT_EQ(got[i].reason, want[i].reason) << "variant " << v << ", request " << i;
      ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "variant " << v << ", request " << i;
      for (size_t t = 0; t < got[i].logprobs.size(); ++t) {
        EXPECT_EQ(got[i].logprobs[t].id, want[i].logprobs[t].id);
        EXPECT_NEAR(got[i].logprobs[t].logprob, want[i].logprobs[t].logprob, 1e-4);
      }
    }
    // The comparison means something only if speculation ran and kept tokens.
    EXPECT_GT(st.spec_num_drafts, 10u) << "variant " << v;
    EXPECT_GT(st.spec_num_accepted_tokens, 10u) << "variant " << v;
    EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
    EXPECT_EQ(st.generation_tokens, plain_stats.generation_tokens) << "variant " << v;
  }
}

TEST(SpecGreedy, Stories260KMixedBatch) {
  Loaded l = load("stories260K.gguf");
  ASSERT_TRUE(l.tok);
  const Tokenizer& tok = *l.tok;
  std::vector<RequestSpec> specs;
  specs.push_back(greedy(tok, "Once upon a time", 200, true));  // the story repeats whole sentences
  specs.push_back(greedy(tok, "Lily was sad and didn't know what to do. Lily was sad and", 60, true));
  specs.push_back(greedy(tok, "One day, a little boy named Tim", 3, true));
  RequestSpec stop = greedy(tok, "The cat sat on the mat. The cat sat on the", 80, true);
  stop.params.stop = {"park"};
  specs.push_back(stop);
  RequestSpec pen = greedy(tok, "Tom and Sam played ball. Tom and Sam", 50, true);
  pen.params.repetition_penalty = 1.15f;  // the host sampler, context-dependent
  specs.push_back(pen);
  RequestSpec lp = greedy(tok, "Once upon a time, there was a little girl named Lily. Once upon a time", 40, true);
  lp.params.logprobs = 2;
  specs.push_back(lp);
  RequestSpec constrained = greedy(tok, "Lily was sad. Lily was sad and", 80, true);
  auto g = grammar::CompiledGrammar::from_gbnf(R"(root ::= [a-zA-Z ,.]+)",
                                               grammar::TokenVocab::from_tokenizer(tok, false));
  ASSERT_TRUE(g) << g.message();
  constrained.grammar = *g;  // structured output: the mask follows the accepted proposals
  specs.push_back(constrained);
  RequestSpec minimum = greedy(tok, "Sam had a red ball", 70, true);
  minimum.params.min_tokens = 50;  // end-of-sequence banned for 50 tokens
  specs.push_back(minimum);

  std::vector<EngineConfig> variants;
  EngineConfig a = base_config();
  a.speculative = ngram(4, 1, 4);
  variants.push_back(a);
  EngineConfig b = base_config();  // proposals cut by the step budget, chunked prefill alongside
  b.speculative = ngram(6, 2, 3);
  b.max_num_batched_tokens = 20;
  variants.push_back(b);
  EngineConfig c = base_config();  // a cache of 24 blocks: preemption (recompute) and prefix-cache reuse
  c.speculative = ngram(3, 1, 2);
  const ModelConfig& mc = l.model->config;
  c.max_model_len = 256;
  const uint64_t block_bytes = 16ull * mc.n_layer * 2 * mc.n_head_kv * mc.head_dim * 2;  // fp16 K and V
  c.kv_cache_memory = 24 * block_bytes;
  variants.push_back(c);
  EngineConfig d = base_config();  // a draft model
  d.speculative = early_exit_draft("stories260K.gguf", 2, 4);
  variants.push_back(d);
  EngineConfig e = c;  // a draft model with preemption, its catch-up spread over steps by a budget of 24 tokens
  e.speculative = early_exit_draft("stories260K.gguf", 3, 5);
  e.max_num_batched_tokens = 24;
  // The draft's pool comes out of the same memory (kv_sizing.h): a block of 3 of the target's layers beside each
  // of the target's 24, and 2 more for the proposals of each of the (at most 24) sequences that can run. The
  // target keeps its 24 blocks.
  KvSizing k;
  k.block_bytes = block_bytes;
  k.draft_block_bytes = block_bytes / mc.n_layer * 3;
  k.draft_extra_blocks = 2;  // ceil(5 / 16) + 1
  k.max_num_seqs = e.max_num_seqs;
  e.kv_cache_memory = k.memory_for_blocks(24);
  variants.push_back(e);
  expect_same_as_plain(l, specs, variants);
}

TEST(SpecGreedy, CodeQwen2MixedBatch) {
  Loaded l = load("code-qwen2-25m");
  ASSERT_TRUE(l.tok);
  const Tokenizer& tok = *l.tok;
  const std::string code =
      "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n\n\n"
      "def lcm(a, b):\n    return a * b // gcd(a, b)\n";
  std::vector<RequestSpec> specs;
  specs.push_back(greedy(tok, code + "\n\n# The same functions, copied:\n\ndef gcd(a, b):\n", 36, false));
  RequestSpec stop = greedy(tok, code + "\n\nclass Math:\n    def gcd(self, a, b):\n", 28, false);
  stop.params.stop = {"return"};
  specs.push_back(stop);
  RequestSpec lp = greedy(tok, "import os\nimport sys\nimport re\nimport os\nimport", 16, false);
  lp.params.logprobs = 1;
  specs.push_back(lp);
  specs.push_back(greedy(tok, "for i in range(10):\n    print(i)\nfor j in range(10):\n", 2, false));

  EngineConfig a = base_config();
  a.speculative = ngram(4, 1, 4);
  EngineConfig b = base_config();
  b.speculative = early_exit_draft("code-qwen2-25m", 6, 3);
  expect_same_as_plain(l, specs, {a, b});
}

}  // namespace
}  // namespace mopt
