// Engine::create: model -> backend runner -> engine. Kept apart from engine.cpp so that programs using
// create_engine_with_runner (tests with a fake runner) do not pull in the backends.
#include "engine/engine_impl.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt {

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const Tokenizer& tokenizer,
                                               const EngineConfig& config) {
  RunnerOptions ro = config.runner;
  ro.max_batch_tokens = config.max_num_batched_tokens;
  ro.max_seqs = config.max_num_seqs;
  ro.spec_tokens =
      config.speculative.method == SpecMethod::kNone ? 0 : config.speculative.num_speculative_tokens;
  auto runner = create_runner(model, ro);
  if (!runner) return runner.status().with_context("creating the model runner");
  return create_engine_with_runner(std::move(runner).value(), &tokenizer, config);
}

}  // namespace mopt
