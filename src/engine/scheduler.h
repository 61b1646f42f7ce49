// Scheduler: vLLM-v1-style token-budget step loop. There are no prefill/decode phases: every request has
// num_computed_tokens and a target (all of its tokens); each step hands out at most max_num_batched_tokens so that
// requests catch up, which gives chunked prefill for free.
//
// Each step: (1) running requests in policy order get their tokens; when blocks run out, the worst running request
// (by policy) is preempted (recompute: blocks freed, it restarts from its tokens; swap: its blocks are copied to a
// host pool) until the request fits or preempts itself. (2) Only if nothing was preempted: swapped requests are
// swapped back in, then waiting requests admitted (reusing their longest cached prefix) while blocks, the token
// budget and max_num_seqs allow. The best request by policy always progresses, so every request finishes.
// A running request that has caught up also gets its speculative proposals (Request::spec_tokens) scheduled when
// the budget and blocks allow (proposals are dropped before anyone is preempted for them).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace mopt {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  int num_swap_blocks = 0;  // host swap pool (swap mode)
};

// Order of service. fcfs: arrival. priority: (priority, arrival). Preemption victims come from the other end.
struct FcfsOrder {
  bool operator()(const Request* a, const Request* b) const { return a->arrival < b->arrival; }
};
struct PriorityOrder {
  bool operator()(const Request* a, const Request* b) const {
    return a->priority != b->priority ? a->priority < b->priority : a->arrival < b->arrival;
  }
};
struct PolicyOrder {
  SchedulingPolicy policy;
  bool operator()(const Request* a, const Request* b) const {
    switch (policy) {
      case SchedulingPolicy::kFcfs: return FcfsOrder{}(a, b);
      case SchedulingPolicy::kPriority: return PriorityOrder{}(a, b);
    }
    return FcfsOrder{}(a, b);
  }
};

struct ScheduledRequest {
  Request* req = nullptr;
  int num_new_tokens = 0;   // tokens [num_computed_tokens, +num_new_tokens) go into this step's batch
  bool needs_logits = false;  // the request catches up this step: sample its next token
  // The last num_spec_tokens of the new tokens are req->spec_tokens (proposed, not yet in req->tokens): their
  // K/V is written, and they stay computed only once accept_spec_tokens() confirms them.
  int num_spec_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  std::vector<std::pair<int32_t, int32_t>> swap_out;  // (device block, host block), run before swap_in
  std::vector<std::pair<int32_t, int32_t>> swap_in;   // (host block, device block), run before the forward
  int num_tokens = 0;
  int num_preempted = 0;
  uint64_t prefix_queries = 0, prefix_hits = 0;        // prompt tokens looked up / found in the prefix cache
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager& kv);

  // Why the request can never be served, or "" if it can (prompt + max_tokens vs max_model_len and the pool).
  std::string check_fits(int num_prompt_tokens, int max_tokens) const;

  void add(Request* req);                 // to the waiting queue
  SchedulerOutput schedule();
  // After the forward pass: advances num_computed_tokens of every scheduled request, caches full blocks.
  void on_step_done(const SchedulerOutput& out);
  // After verification of a scheduled request's num_spec_tokens proposals: its first `n_accepted` proposals were
  // appended to req->tokens (with the target's own next token after them), so their K/V stays; the K/V of the
  // rejected ones is rolled back (blocks past req->tokens are freed; none of them was offered to the prefix
  // cache), and the newly full blocks are cached.
  void accept_spec_tokens(Request* req, int n_accepted);
  // Removes the request from any queue and frees its device and host blocks (finish or abort).
  void finish(Request* req);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  int num_free_swap_blocks() const { return static_cast<int>(free_swap_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty() || !swapped_.empty(); }
  uint64_t total_preemptions() const { return preemptions_; }
  const SchedulerConfig& config() const { return cfg_; }
  KVCacheManager& kv() { return kv_; }

  // Every request the scheduler holds, in no particular order (for invariant checks).
  std::vector<Request*> all_requests() const;
  // Cross-checks block pool ref counts against the block tables of all held requests, the swap pool, and the
  // queue states. "" when consistent.
  std::string check_invariants() const;

 private:
  void preempt(Request* victim, SchedulerOutput& out);
  bool try_swap_in(Request* req, int& budget, SchedulerOutput& out);
  bool try_admit(Request* req, int& budget, SchedulerOutput& out);

  SchedulerConfig cfg_;
  KVCacheManager& kv_;
  PolicyOrder order_;
  std::vector<Request*> running_;                  // sorted by order_ at the start of each step
  std::set<Request*, PolicyOrder> waiting_;
  std::set<Request*, PolicyOrder> swapped_;
  std::vector<int32_t> free_swap_;                 // free host swap blocks
  uint64_t preemptions_ = 0;
};

}  // namespace mopt
