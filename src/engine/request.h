// Request: the engine's state of one generation request, as seen by the scheduler and the KV cache manager.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/sampling_params.h"

namespace mopt {

enum class RequestState { kWaiting, kRunning, kSwapped, kFinished };

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;              // admission order: fcfs key and tie-break
  int priority = 0;                  // lower runs first under the priority policy
  std::string cache_salt;            // mixed into the first block hash (per-tenant prefix-cache isolation)
  SamplingParams params;
  std::vector<int32_t> tokens;       // [num_tokens] prompt ids, then generated ids
  int num_prompt_tokens = 0;
  int num_computed_tokens = 0;       // tokens whose K/V is in the cache
  RequestState state = RequestState::kWaiting;

  // KV cache (owned by KVCacheManager / Scheduler).
  std::vector<int32_t> block_table;  // [ceil(cached tokens / block_size)] device blocks, append-only while resident
  std::vector<BlockHash> block_hashes;  // [full blocks of tokens] chained prefix-cache hashes, computed lazily
  int num_cached_blocks = 0;         // leading block_table entries already offered to the prefix cache
  // Most leading tokens the prefix cache may serve at admission: positions whose logits are still wanted (prompt
  // logits / prompt logprobs) must be computed.
  int prefix_cache_limit = std::numeric_limits<int>::max();
  std::vector<int32_t> swap_blocks;  // host swap blocks holding block_table's contents while kSwapped
  // Speculative decoding: tokens proposed to follow `tokens`, set before schedule() and cut to what the scheduler
  // gave room for; they are not part of `tokens` until verified.
  std::vector<int32_t> spec_tokens;  // [<= num_speculative_tokens]

  // Statistics.
  std::chrono::steady_clock::time_point added_at{};  // add_request()
  double queue_seconds = -1;         // added_at -> first scheduled (set at first admission; -1 before)
  int num_cached_prompt_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  int num_preemptions = 0;
  bool admitted_once = false;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

}  // namespace mopt
