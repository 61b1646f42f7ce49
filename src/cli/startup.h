// The startup phases of `run` and `serve` (docs/warmup.md): reading the weights, creating the engine (weight upload,
// KV cache allocation: the backends log those lines with their times), then the engine's warm-up, shown as
// progress on stderr, and one summary line naming every phase with its time.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace mopt::cli {

struct StartupTimes {
  double read_s = 0;    // model + tokenizer read from disk
  double engine_s = 0;  // Engine::create: the runner (weight upload) and the KV cache
  double warmup_s = 0;  // Engine::warmup
  WarmupReport warm;
};

// Engine::create with the weight upload's progress on stderr (RunnerOptions::load_progress: the CUDA runner's
// upload; a backend that reports none shows none); `phase` (may be empty) gets "weight upload 41% (6.60G of
// 16.10G bytes)" as it goes.
Result<std::unique_ptr<Engine>> create_engine(const Model& model, const Tokenizer& tokenizer, EngineConfig config,
                                              const std::function<void(const std::string&)>& phase = {});

// Engine::warmup with a progress display on stderr; `phase` (may be empty) gets "warm-up i/n: what" as it goes.
Status warm_up_engine(Engine& engine, StartupTimes& times, const std::function<void(const std::string&)>& phase);

// "startup: read weights 2.31 s, engine (weight upload, KV cache) 1.20 s, warm-up 1.85 s (...)"
std::string format_startup(const StartupTimes& t);

}  // namespace mopt::cli
