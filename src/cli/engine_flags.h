// Engine command-line flags shared by `mopt run` and `mopt serve`.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace mopt {

// Adds --block-size, --kv-cache-memory, --gpu-memory-utilization, --swap-space, --no-prefix-caching,
// --max-num-seqs, --max-num-batched-tokens, --max-model-len, --scheduling-policy, --preemption-mode, --device,
// --threads, --speculative-config and --enforce-eager to `app`, writing into `cfg` (which must outlive parsing).
void add_engine_flags(CLI::App& app, EngineConfig& cfg);

}  // namespace mopt
