// Engine internals shared by engine.cpp (the implementation) and engine_create.cpp (model -> runner -> engine).
#pragma once

#include <memory>
#include <vector>

#include "backend/runner.h"
#include "engine/engine.h"

namespace mopt {

// An engine over an existing runner (used by Engine::create, by tests with a fake runner, and by custom backends).
// tokenizer may be null: then no text is produced, stop strings are rejected, and `eog_ids` end generation.
Result<std::unique_ptr<Engine>> create_engine_with_runner(std::unique_ptr<ModelRunner> runner,
                                                          const Tokenizer* tokenizer, const EngineConfig& config,
                                                          std::vector<int32_t> eog_ids = {});

// Test hook for engines made here: cross-checks the scheduler queues, block tables, block pool ref counts, free
// list, prefix-cache map and swap pool. "" when they hold, else the first violation.
std::string check_engine_invariants(Engine& engine);

}  // namespace mopt
