// A draft model on the GPU (GPU only; skipped without one): with the target on CUDA the draft runs there too, its
// KV pool sized with the target's. Greedy output of a mixed batch equals the plain CUDA engine's token for token,
// proposals are accepted, and the engine's warm-up also warms the draft's runner (no GEMM tuned and no graph
// captured while the requests run). The draft is an early exit of the target (its first layers, then its final
// norm and output), the only draft with the target's tokenizer among the test models.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

struct EngineRun {
  std::vector<std::vector<int32_t>> tokens;  // per request, in the order added
  EngineStats stats;
};

// One engine, warmed up, runs `prompts` (greedy, max_tokens each) to completion.
EngineRun run_warmed(const Model& model, const Tokenizer& tok, const EngineConfig& cfg,
               const std::vector<std::string>& prompts, int max_tokens) {
  EngineRun out;
  auto e = Engine::create(model, tok, cfg);
  EXPECT_TRUE(e) << e.message();
  if (!e) return out;
  Engine& eng = **e;
  auto w = eng.warmup({});
  EXPECT_TRUE(w) << w.message();
  std::map<uint64_t, std::vector<int32_t>> got;
  std::vector<uint64_t> ids;
  for (const std::string& p : prompts) {
    RequestSpec s;
    s.prompt = tok.encode(p, true, false);
    s.params.temperature = 0;
    s.params.max_tokens = max_tokens;
    s.params.ignore_eos = true;
    AddResult r = eng.add_request(s, [&got](const RequestOutput& o) {
      auto& t = got[o.request_id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
    });
    EXPECT_EQ(r.error, AddError::kNone) << r.message;
    ids.push_back(r.request_id);
  }
  for (int i = 0; eng.has_unfinished() && i < 100000; ++i) eng.step();
  EXPECT_FALSE(eng.has_unfinished()) << "no progress";
  for (uint64_t id : ids) out.tokens.push_back(got[id]);
  out.stats = eng.stats();
  return out;
}

TEST(SpecDraftCuda, GreedyEqualsPlainAndTheWarmupCoversTheDraft) {
  if (Status u = cuda_backend_usable(); !u) GTEST_SKIP() << "no CUDA GPU: " << u.message();
  set_log_level(LogLevel::kWarn);
  auto m = load_model(test::model_path("stories260K.gguf"));
  ASSERT_TRUE(m) << m.message() << " (set MOPT_MODELS_DIR)";
  std::unique_ptr<Model> target = std::move(m).value();
  auto t = Tokenizer::create(target->vocab);
  ASSERT_TRUE(t) << t.message();
  auto dm = load_model(test::model_path("stories260K.gguf"));
  ASSERT_TRUE(dm) << dm.message();
  std::shared_ptr<Model> draft = std::move(dm).value();
  draft->config.n_layer = 2;  // of 5

  EngineConfig cfg;
  cfg.runner.device = DeviceKind::kCuda;
  cfg.runner.plan_cache = false;
  cfg.block_size = 16;
  cfg.max_model_len = 512;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 256;
  const std::vector<std::string> prompts = {
      "Lily was sad. Lily was sad. Lily was sad. Lily was",
      "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little",
      "The cat sat on the mat.",
      "Tom and Sam went to the park. Tom and Sam",
      "One day, a big dog"};  // 5 requests, 4 sequences at a time: one waits for a slot
  const int max_tokens = 120;
  const EngineRun plain = run_warmed(*target, **t, cfg, prompts, max_tokens);
  ASSERT_EQ(plain.tokens.size(), prompts.size());

  EngineConfig s = cfg;
  s.speculative.method = SpecMethod::kDraftModel;
  s.speculative.num_speculative_tokens = 4;
  s.speculative.draft = draft;
  const EngineRun spec = run_warmed(*target, **t, s, prompts, max_tokens);
  ASSERT_EQ(spec.tokens.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(plain.tokens[i].size(), static_cast<size_t>(max_tokens)) << "request " << i;
    EXPECT_EQ(spec.tokens[i], plain.tokens[i]) << "request " << i << ": speculative greedy output differs";
  }
  EXPECT_GT(spec.stats.spec_num_drafts, 20u);
  EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0u);
  EXPECT_LE(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
  EXPECT_TRUE(spec.stats.warmed_up);
  EXPECT_EQ(spec.stats.tunings_after_warmup, 0u) << "the warm-up missed GEMM shapes (the draft's?)";
  EXPECT_EQ(spec.stats.captures_after_warmup, 0u) << "the warm-up missed CUDA graphs (the draft's?)";
  EXPECT_EQ(spec.stats.free_blocks, spec.stats.num_blocks) << "blocks leaked";
}

}  // namespace
}  // namespace mopt
