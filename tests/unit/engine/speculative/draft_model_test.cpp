// DraftModel (engine/speculative/draft_model.h) on stories260K through the CPU runner: its proposals are the
// greedy continuation of each request's tokens whatever it cached before (the tokens growing by accepted and
// rejected proposals, cut short, changed in the middle, several requests a call, a pool small enough to evict),
// checked against a fresh DraftModel, and against decoding the continuation one token at a time with the plain
// runner; a long prompt is fed a step's budget at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/runner.h"
#include "core/argmax.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/speculative/draft_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

constexpr int kBlock = 16;

std::shared_ptr<const Model> stories() {
  set_log_level(LogLevel::kWarn);
  auto m = load_model(test::model_path("stories260K.gguf"));
  EXPECT_TRUE(m) << m.message() << " (set MOPT_MODELS_DIR)";
  if (!m) return nullptr;
  return std::shared_ptr<const Model>(std::move(m).value());
}

std::unique_ptr<DraftModel> make(const std::shared_ptr<const Model>& m, int n_blocks, int max_tokens, int max_seqs) {
  RunnerOptions ro;
  ro.device = DeviceKind::kCpu;
  ro.n_threads = 1;
  ro.max_batch_tokens = max_tokens;
  ro.max_seqs = max_seqs;
  auto r = create_runner(*m, ro);
  EXPECT_TRUE(r) << r.message();
  if (!r) return nullptr;
  auto d = std::make_unique<DraftModel>(std::move(r).value(), m);
  Status st = d->init(n_blocks, kBlock, max_tokens, max_seqs);
  EXPECT_TRUE(st) << st.message();
  return d;
}

// The greedy continuation of `tokens` by k one-token steps of a plain runner (a whole prefill, then decodes).
std::vector<int32_t> reference(const Model& m, std::vector<int32_t> tokens, int k) {
  RunnerOptions ro;
  ro.device = DeviceKind::kCpu;
  ro.n_threads = 1;
  ro.max_batch_tokens = 512;
  ro.max_seqs = 1;
  auto r = create_runner(m, ro);
  EXPECT_TRUE(r) << r.message();
  const int n_blocks = 40;
  EXPECT_TRUE(r.value()->init_kv_cache(n_blocks, kBlock, 0));
  const int V = m.config.n_vocab;
  std::vector<int32_t> out;
  std::vector<float> logits(static_cast<size_t>(V));
  int pos = 0;
  for (int i = 0; i < k; ++i) {
    BatchArrays b;
    b.max_blocks_per_seq = n_blocks;
    for (int p = pos; p < static_cast<int>(tokens.size()); ++p) {
      b.tokens.push_back(tokens[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(p);
    }
    b.query_start.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seq_lens.push_back(static_cast<int32_t>(tokens.size()));
    for (int j = 0; j < n_blocks; ++j) b.block_tables.push_back(j);
    b.logits_indices.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
    EXPECT_TRUE(r.value()->forward(b.view(), logits.data()));
    pos = static_cast<int>(tokens.size());
    out.push_back(argmax_first(logits.data(), V));
    tokens.push_back(out.back());
  }
  return out;
}

TEST(DraftModel, ProposalsAreTheGreedyContinuationWhateverWasCached) {
  const auto m = stories();
  ASSERT_TRUE(m);
  const int V = m->config.n_vocab;
  // A pool of 14 blocks (224 tokens) for three requests of up to ~100 tokens: entries get evicted and rebuilt.
  auto draft = make(m, 14, 24, 3);
  ASSERT_TRUE(draft);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs(3);
  for (auto& s : seqs) {
    s.push_back(1);  // BOS
    for (int i = 0; i < 5; ++i) s.push_back(static_cast<int32_t>(rng() % V));
  }
  int checked = 0, reused = 0, waiting = 0;
  for (int round = 0; round < 40; ++round) {
    std::vector<std::vector<int32_t>> outs(3);
    std::vector<DraftJob> jobs;
    std::vector<uint64_t> ids;
    for (uint64_t q = 0; q < 3; ++q) {
      if (rng() % 4 == 0) continue;  // this request does not speculate this round
      jobs.push_back({q + 1, seqs[q], 1 + static_cast<int>(rng() % 5), &outs[q]});
      ids.push_back(q + 1);
    }
    const int in_use = draft->blocks_in_use();
    ASSERT_TRUE(draft->propose(jobs));
    reused += in_use > 0;
    for (const DraftJob& j : jobs) {
      auto fresh = make(m, 14, 512, 3);  // catches up in one call
      std::vector<int32_t> want;
      const DraftJob one{j.id, j.tokens, j.k, &want};
      ASSERT_TRUE(fresh->propose({&one, 1}));
      if (want.empty()) continue;  // did not fit even alone: nothing to compare
      if (j.out->empty()) {  // still catching up (24 tokens a call) or evicted for lack of blocks
        ++waiting;
        continue;
      }
      ASSERT_EQ(*j.out, want) << "round " << round << ", request " << j.id;
      if (round % 8 == 0) {
        EXPECT_EQ(want, reference(*m, std::vector<int32_t>(j.tokens.begin(), j.tokens.end()), j.k));
      }
      ++checked;
    }
    // What the target would accept: a random prefix of the proposals, then its own token; sometimes the
    // request is restarted from an earlier point (tokens diverge from what the draft holds).
    for (const DraftJob& j : jobs) {
      auto& s = seqs[j.id - 1];
      const size_t accept = j.out->empty() ? 0 : rng() % (j.out->size() + 1);
      s.insert(s.end(), j.out->begin(), j.out->begin() + static_cast<std::ptrdiff_t>(accept));
      s.push_back(static_cast<int32_t>(rng() % V));
      if (rng() % 10 == 0) s.resize(std::max<size_t>(2, s.size() / 2));
      if (rng() % 10 == 1) s[s.size() / 2] = static_cast<int32_t>(rng() % V);  // (the engine never does this)
      if (s.size() > 100) s.resize(8);
    }
    if (round == 20) draft->retain(std::vector<uint64_t>{2});  // requests 1 and 3 gone, then back
  }
  EXPECT_GT(checked, 40);
  EXPECT_GT(waiting, 0);
  EXPECT_GT(reused, 30);
  std::printf("draft proposals checked: %d; calls still catching up: %d\n", checked, waiting);
}

// A long prompt is fed max_tokens at a time, one forward a call, and proposals start once it is caught up; the
// shortest catch-ups go first.
TEST(DraftModel, CatchUpIsChunkedAcrossCalls) {
  const auto m = stories();
  ASSERT_TRUE(m);
  auto draft = make(m, 20, 16, 2);
  ASSERT_TRUE(draft);
  std::vector<int32_t> tokens(50);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(1 + (i * 7) % 300);
  std::vector<int32_t> out;
  const DraftJob job{1, tokens, 2, &out};
  for (int call = 0; call < 3; ++call) {  // 16, 32, 48 of 50 tokens fed
    ASSERT_TRUE(draft->propose({&job, 1}));
    EXPECT_TRUE(out.empty()) << "call " << call;
  }
  ASSERT_TRUE(draft->propose({&job, 1}));
  EXPECT_EQ(out, reference(*m, tokens, 2));
  // A new long prompt listed first does not crowd out a short catch-up: the shortest are fed first.
  std::vector<int32_t> other(40, 9), out_other;
  tokens.push_back(out[0]);
  const DraftJob both[] = {{2, other, 2, &out_other}, {1, tokens, 2, &out}};
  ASSERT_TRUE(draft->propose(both));
  EXPECT_EQ(out, reference(*m, tokens, 2));
  EXPECT_TRUE(out_other.empty());
}

TEST(DraftModel, TokensThatDoNotFitGetNoProposal) {
  const auto m = stories();
  ASSERT_TRUE(m);
  auto draft = make(m, 2, 64, 2);  // 32 tokens in all
  ASSERT_TRUE(draft);
  std::vector<int32_t> long_tokens(40, 5), out;
  const DraftJob job{1, long_tokens, 3, &out};
  ASSERT_TRUE(draft->propose({&job, 1}));
  EXPECT_TRUE(out.empty());
  std::vector<int32_t> short_tokens = {1, 5, 9}, out2;
  const DraftJob fits{2, short_tokens, 3, &out2};
  ASSERT_TRUE(draft->propose({&fits, 1}));
  EXPECT_EQ(out2.size(), 3u);
}

// Engine::create refuses a draft model it cannot use, saying why.
TEST(DraftModel, EngineRefusesAnUnusableDraft) {
  const auto target = stories();
  ASSERT_TRUE(target);
  auto tok = Tokenizer::create(target->vocab);
  ASSERT_TRUE(tok) << tok.message();
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.max_model_len = 256;
  cfg.kv_cache_memory = 16ull << 20;
  cfg.runner.device = DeviceKind::kCpu;
  cfg.runner.n_threads = 1;
  cfg.speculative.method = SpecMethod::kDraftModel;
  cfg.speculative.num_speculative_tokens = 3;
  const std::pair<std::string, std::string> cases[] = {
      {test::model_path("code-qwen2-25m"), "must share the target's tokenizer"},
      {test::model_path("no-such-model.gguf"), "loading the draft model"},
  };
  for (const auto& [path, needle] : cases) {
    cfg.speculative.model = path;
    auto e = Engine::create(*target, **tok, cfg);
    ASSERT_FALSE(e) << path;
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
  // A draft whose context is shorter than --max-model-len.
  auto m = load_model(test::model_path("stories260K.gguf"));
  ASSERT_TRUE(m);
  std::shared_ptr<Model> short_ctx = std::move(m).value();
  short_ctx->config.context_length = 128;
  cfg.speculative.model.clear();
  cfg.speculative.draft = short_ctx;
  auto e = Engine::create(*target, **tok, cfg);
  ASSERT_FALSE(e);
  EXPECT_NE(e.message().find("shorter than --max-model-len"), std::string::npos) << e.message();
  cfg.max_model_len = 128;  // fits now
  auto ok = Engine::create(*target, **tok, cfg);
  EXPECT_TRUE(ok) << ok.message();
}

}  // namespace
}  // namespace mopt
