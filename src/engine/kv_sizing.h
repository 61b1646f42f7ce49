// KV cache sizing: how many blocks the engine allocates. One function for Engine::create and `mopt plan`, so
// that what plan predicts and what run/serve allocate cannot drift apart.
//
// Rules (docs/doctor.md, "plan formulas"):
//   - explicit --kv-cache-memory: as many blocks as fit in it;
//   - CPU: by need, max_num_seqs x blocks_per_seq (max_model_len rounded up to blocks), capped by the memory
//     budget (as llama.cpp sizes by context and vLLM's CPU backend by a fixed space), never a fraction of RAM;
//   - CUDA: the memory budget (--gpu-memory-utilization of the device, minus what is in use), capped at twice
//     the need (more buys nothing; the second half keeps prefix-cache blocks around).
//   - with a draft model (speculative decoding), its KV pool comes out of the same memory (budget or
//     --kv-cache-memory): a draft block beside each of the target's, and ceil(k / block_size) + 1 more for the
//     proposals of each sequence that can run (at most one per target block, at most max_num_seqs), so the
//     two pools are sized together (KvSizing::memory_for_blocks).
#pragma once

#include <cstdint>
#include <string>

#include "backend/runner.h"
#include "core/status.h"

namespace mopt {

struct KvSizingRequest {
  DeviceKind device = DeviceKind::kCpu;  // kCpu or kCuda (resolved)
  int block_size = 0;                    // tokens per block; 0 = default_block_size
  int default_block_size = 16;           // the backend's (ModelRunner::default_block_size())
  int max_model_len = 0;                 // 0 = context_length
  int context_length = 0;                // the model's trained context (0 = unknown)
  int max_num_seqs = 256;
  uint64_t kv_bytes_per_token = 0;      // K+V bytes of one token position, all layers (kv_block_bytes(1))
  uint64_t kv_cache_memory = 0;         // explicit --kv-cache-memory; 0 = derive from memory_budget
  uint64_t memory_budget = 0;           // what the device can give the KV cache (available_kv_memory(util))
  double gpu_memory_utilization = 0.9;  // only for messages
  // A draft model beside the target (SpecMethod::kDraftModel): K+V bytes of one token position of the draft
  // (0: no draft), and num_speculative_tokens (the proposals each sequence's draft pool holds beyond its tokens).
  uint64_t draft_kv_bytes_per_token = 0;
  int num_speculative_tokens = 0;
};

enum class KvSizingRule {
  kExplicit,  // --kv-cache-memory
  kNeed,      // max_num_seqs x blocks_per_seq (CPU), or twice that (CUDA), under the budget
  kBudget,    // the memory budget bound
};

struct KvSizing {
  int block_size = 0;          // resolved
  int max_model_len = 0;       // resolved
  uint64_t block_bytes = 0;    // kv_bytes_per_token x block_size
  int64_t blocks_per_seq = 0;  // ceil(max_model_len / block_size)
  uint64_t need_blocks = 0;    // max_num_seqs x blocks_per_seq
  uint64_t budget = 0;         // bytes the pool may take: kv_cache_memory, or memory_budget
  int num_blocks = 0;
  KvSizingRule rule = KvSizingRule::kBudget;
  // The draft model's pool (0 without one): num_blocks plus draft_extra_blocks per sequence that can run, never
  // more than every sequence at max_model_len plus its proposals; blocks of block_size tokens of draft_block_bytes.
  uint64_t draft_block_bytes = 0;
  int64_t draft_extra_blocks = 0;  // ceil(num_speculative_tokens / block_size) + 1 per sequence
  int draft_num_blocks = 0;
  int max_num_seqs = 0;  // the request's

  // Memory for n blocks of the model's pool and the draft's blocks that go with them; blocks_in: the most blocks
  // whose memory fits `bytes` (the inverse, used by the sizing and by `mopt serve --memory-limit`).
  uint64_t memory_for_blocks(uint64_t n) const;
  uint64_t blocks_in(uint64_t bytes) const;
  uint64_t pool_bytes() const { return block_bytes * static_cast<uint64_t>(num_blocks); }
  uint64_t draft_pool_bytes() const { return draft_block_bytes * static_cast<uint64_t>(draft_num_blocks); }
  // Sequences of max_model_len tokens the pool holds at once.
  double max_concurrency() const { return static_cast<double>(num_blocks) / static_cast<double>(blocks_per_seq); }
  // What decided the size, for logs: "need: 1 x 2048 tokens", "--kv-cache-memory", ...
  std::string describe(const KvSizingRequest& req) const;
};

// Validates the request (block size, max_model_len against the context, utilization) and sizes the pool.
// An error says which flag to change (e.g. a pool that cannot hold one sequence of max_model_len).
Result<KvSizing> size_kv_cache(const KvSizingRequest& req);

}  // namespace mopt
