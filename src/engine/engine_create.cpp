// Engine::create: model -> backend runner -> engine. Kept apart from engine.cpp so that programs using
// create_engine_with_runner (tests with a fake runner) do not pull in the backends.
#include "engine/engine_impl.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt {
namespace {

// The draft model (loaded from its path unless the config brings it), checked against the target, and its runner
// on the target's device, KV cache not yet allocated (create_engine_with_runner sizes it with the target's). The
// draft runs unsharded (on CUDA on the first device), as vLLM's draft_tensor_parallel_size 1.
Result<std::unique_ptr<DraftModel>> create_draft_model(const Model& target, const EngineConfig& config,
                                                       const RunnerOptions& target_opts, DeviceKind target_device) {
  const SpeculativeConfig& sc = config.speculative;
  std::shared_ptr<const Model> dm = sc.draft;
  if (!dm) {
    auto m = load_model(sc.model);
    if (!m) return m.status().with_context("loading the draft model " + sc.model);
    dm = std::shared_ptr<const Model>(std::move(m).value());
  }
  const std::string what = sc.model.empty() ? std::string("the draft model") : "the draft model " + sc.model;
  if (dm->vocab_only) return error("%s has no weights (a vocabulary-only file)", what.c_str());
  if (dm->config.n_vocab != target.config.n_vocab)
    return error("%s has %d token ids, the target %d: a draft model must share the target's tokenizer",
                 what.c_str(), dm->config.n_vocab, target.config.n_vocab);
  if (dm->vocab.tokens != target.vocab.tokens) {
    size_t i = 0;
    const size_t n = std::min(dm->vocab.tokens.size(), target.vocab.tokens.size());
    while (i < n && dm->vocab.tokens[i] == target.vocab.tokens[i]) ++i;
    return error("%s's vocabulary differs from the target's (first at token id %zu): a draft model must share "
                 "the target's tokenizer", what.c_str(), i);
  }
  RunnerOptions ro = target_opts;
  ro.spec_tokens = 0;
  ro.device = target_device;
  ro.tensor_parallel_size = 1;
  ro.load_progress = nullptr;  // the target's bar only
  auto runner = create_runner(*dm, ro);
  if (!runner) return runner.status().with_context("creating the draft model's runner");
  return std::make_unique<DraftModel>(std::move(runner).value(), std::move(dm));
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer& tokenizer,
                                               const EngineConfig& config) {
  RunnerOptions ro = config.runner;
  ro.max_batch_tokens = config.max_num_batched_tokens;
  ro.max_seqs = config.max_num_seqs;
  ro.spec_tokens =
      config.speculative.method == SpecMethod::kNone ? 0 : config.speculative.num_speculative_tokens;
  auto runner = create_runner(model, ro);
  if (!runner) return runner.status().with_context("creating the model runner");
  std::unique_ptr<DraftModel> draft;
  if (config.speculative.method == SpecMethod::kDraftModel) {
    MOPT_ASSIGN_OR_RETURN(draft, create_draft_model(model, config, ro, runner.value()->device()));
  }
  return create_engine_with_runner(std::move(runner).value(), &tokenizer, config, {}, std::move(draft));
}

}  // namespace mopt
