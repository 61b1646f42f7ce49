// Draft-model proposals (SpecMethod::kDraftModel, vLLM's "draft_model"; docs/speculative.md): a smaller model with
// the target's vocabulary continues each request's tokens greedily on its own runner and KV cache, and the target
// verifies the continuation in one step. Greedy proposals are a point-mass draft distribution, so the engine's
// verification (speculative/engine_spec.cpp) keeps the target's output distribution exactly.
//
// The draft's KV cache is a pool of blocks handed to requests as their tokens need them. Each request's entry
// remembers the tokens whose K/V the draft holds; the next proposal feeds only the tokens after the longest
// common prefix with the request's tokens now (after a step: the accepted proposals' K/V is already there, a
// rejected one's is overwritten). Entries of requests that are gone, or that no proposal asked for lately, are
// freed when blocks run short; a request whose tokens do not fit gets no proposal that step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/runner.h"
#include "core/status.h"

namespace mopt {

class Model;

// One request's proposal: up to k tokens continuing `tokens` (prompt + output so far) into *out.
struct DraftJob {
  uint64_t id = 0;
  std::span<const int32_t> tokens;  // [L >= 1]
  int k = 0;
  std::vector<int32_t>* out = nullptr;
};

class DraftModel {
 public:
  // runner: the draft's runner, its KV cache not allocated yet; model: what the runner reads (kept alive here).
  DraftModel(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const Model> model);
  // Allocates n_blocks of block_size tokens; calls of forward take at most max_tokens tokens and max_seqs sequences.
  Status init(int n_blocks, int block_size, int max_tokens, int max_seqs);
  // Fills every job's *out with its greedy continuation (cleared first). Left empty when its tokens do not fit
  // the pool, or while the draft is still catching up with them: each call feeds at most max_tokens of the jobs'
  // tokens that the draft does not hold (a new request's prompt takes ceil(L / max_tokens) calls), then up to
  // k - 1 one-token forwards.
  Status propose(std::span<const DraftJob> jobs);
  // Forgets requests that are not in `live` (sorted ids): their blocks go back to the pool.
  void retain(std::span<const uint64_t> live);
  // The runner's warm-up (ModelRunner::warmup), after init.
  Result<WarmupReport> warmup(const WarmupProgress& progress) { return runner_->warmup(progress); }
  const ModelRunner& runner() const { return *runner_; }
  int blocks_in_use() const { return n_blocks_ - static_cast<int>(free_.size()); }

 private:
  struct Entry {
    std::vector<int32_t> blocks;  // the K/V of positions [i * block_size, (i + 1) * block_size) in blocks[i]
    std::vector<int32_t> cached;  // tokens whose K/V the draft holds, positions 0 ..
    uint64_t last_used = 0;
  };
  // Gives e blocks for n tokens, freeing the least recently used entries not in `busy` when the pool runs short.
  bool reserve(Entry& e, int n, const std::vector<uint64_t>& busy);
  void release(Entry& e);
  // One forward over `parts` (entry, first position, tokens to feed; the last one's greedy next token wanted
  // when `want`), writing the picks to picks[i] (-1 without).
  struct Part {
    Entry* e;
    int pos;
    std::span<const int32_t> feed;
    bool want;
  };
  Status forward(std::span<const Part> parts, std::vector<int32_t>& picks);

  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const Model> model_;
  int n_blocks_ = 0, block_size_ = 0, max_tokens_ = 0, max_seqs_ = 0;
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t clock_ = 0;
  BatchArrays batch_;
  std::vector<RowSampling> greedy_;
};

}  // namespace mopt
