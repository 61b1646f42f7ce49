// Engine command-line flags shared by `mopt run` and `mopt serve`.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "engine/engine.h"

namespace mopt {

// Adds --block-size, --kv-cache-memory, --gpu-memory-utilization, --swap-space, --no-prefix-caching,
// --max-num-seqs, --max-num-batched-tokens, --max-model-len, --scheduling-policy, --preemption-mode, --device,
// --threads, --tensor-parallel-size, --speculative-config and --enforce-eager to `app`, writing into `cfg` (which must outlive parsing).
void add_engine_flags(CLI::App& app, EngineConfig& cfg);

// The spellings --kv-cache-dtype takes (any case): auto, fp32 / float32, fp16 / float16, fp8 / fp8_e4m3.
const std::map<std::string, KvCacheDtype>& kv_cache_dtype_spellings();

}  // namespace mopt
