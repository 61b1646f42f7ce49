// Whether a CPU server with given settings fits a host memory limit (`mopt serve --memory-limit`, or the
// cgroup's), planned before anything is loaded: the plan's weights, workspace and KV cache against the limit.
// `mopt serve` refuses to start when they do not fit; `mopt gate` checks the same figures.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "plan/model_shape.h"

namespace mopt::plan {

struct HostLimit {
  uint64_t bytes = 0;   // 0: no limit
  std::string source;   // "--memory-limit", "cgroup v2 memory.max", ""
};
// The explicit limit when > 0, else the tightest cgroup memory limit of this process (v1 or v2), else none.
HostLimit host_memory_limit(uint64_t explicit_bytes);

struct MemoryFit {
  HostLimit limit;
  uint64_t weights = 0, workspace = 0, kv_cache = 0;  // bytes, as planned (with a draft model's, if any)
  uint64_t draft_weights = 0;                         // of `weights`: the draft model's
  // What the engine must be given as --kv-cache-memory to size its pool as planned (the limit capped it); 0 when
  // the engine's own sizing already gives the planned pool.
  uint64_t kv_cache_memory = 0;
  uint64_t footprint() const { return weights + workspace + kv_cache; }
  // "weights 1.1 MiB + workspace 2.0 MiB + KV cache 40 MiB = 43 MiB, under the 1.0 GiB limit (--memory-limit)"
  std::string describe() const;
};

// Plans `model` on this host's CPU with the engine settings `e` (kv_cache_dtype: "auto", "fp16" or "fp32") under
// `limit`: the KV cache gets at most what the limit leaves after the weights and the workspace. An error that
// says what to change when the server cannot fit (the weights alone, or the KV cache of one sequence). `draft`:
// a draft model's shape (speculative decoding, e.speculative), whose weights and workspace count as fixed costs
// and whose KV pool is sized with the model's, out of the same memory, as the engine does.
Result<MemoryFit> fit_memory_limit(const ModelShape& model, const EngineConfig& e, const std::string& kv_cache_dtype,
                                   const HostLimit& limit, const ModelShape* draft = nullptr);

}  // namespace mopt::plan
