#include "engine/scheduler.h"

#include <algorithm>

#include "core/status.h"
#include "core/strfmt.h"

namespace mopt {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager& kv)
    : cfg_(config), kv_(kv), order_{config.policy}, waiting_(order_), swapped_(order_) {
  MOPT_CHECK(cfg_.max_num_seqs > 0 && cfg_.max_num_batched_tokens > 0 && cfg_.max_model_len > 0,
             "scheduler limits must be positive");
  for (int32_t i = cfg_.num_swap_blocks - 1; i >= 0; --i) free_swap_.push_back(i);
}

std::string Scheduler::check_fits(int num_prompt_tokens, int max_tokens) const {
  const int64_t total = static_cast<int64_t>(num_prompt_tokens) + max_tokens;
  if (total > cfg_.max_model_len)
    return strfmt("prompt (%d tokens) + max_tokens (%d) = %lld exceeds the maximum context length %d; "
                  "shorten the prompt or lower max_tokens",
                  num_prompt_tokens, max_tokens, static_cast<long long>(total), cfg_.max_model_len);
  const int64_t blocks = (total + kv_.block_size() - 1) / kv_.block_size();
  if (blocks > kv_.pool().num_blocks())
    return strfmt("prompt + max_tokens = %lld tokens needs %lld KV blocks but the whole cache has %d "
                  "(%d tokens); lower max_tokens or give the KV cache more memory",
                  static_cast<long long>(total), static_cast<long long>(blocks), kv_.pool().num_blocks(),
                  kv_.pool().num_blocks() * kv_.block_size());
  return {};
}

void Scheduler::add(Request* req) {
  MOPT_CHECK(req->num_tokens() > 0, "request %llu has no tokens", static_cast<unsigned long long>(req->id));
  req->state = RequestState::kWaiting;
  waiting_.insert(req);
}

void Scheduler::preempt(Request* victim, SchedulerOutput& out) {
  ++preemptions_;
  ++out.num_preempted;
  ++victim->num_preemptions;
  victim->spec_tokens.clear();
  const size_t n = victim->block_table.size();
  if (cfg_.preemption == PreemptionMode::kSwap && n > 0 && free_swap_.size() >= n) {
    victim->swap_blocks.clear();
    for (size_t i = 0; i < n; ++i) {
      const int32_t host = free_swap_.back();
      free_swap_.pop_back();
      out.swap_out.emplace_back(victim->block_table[i], host);
      victim->swap_blocks.push_back(host);
    }
    kv_.free(*victim);  // the blocks keep their data (and hashes) until reallocated; the copy runs first
    victim->state = RequestState::kSwapped;
    swapped_.insert(victim);
    return;
  }
  // Recompute (also the fallback when the swap pool is full).
  kv_.free(*victim);
  victim->num_computed_tokens = 0;
  victim->state = RequestState::kWaiting;
  waiting_.insert(victim);
}

bool Scheduler::try_swap_in(Request* req, int& budget, SchedulerOutput& out) {
  const int n = static_cast<int>(req->swap_blocks.size());
  const int num_new = std::min(req->num_tokens() - req->num_computed_tokens, budget);
  MOPT_CHECK(num_new > 0, "swapped request with nothing to compute");
  const int need = std::max(n, kv_.blocks_for_tokens(int64_t{req->num_computed_tokens} + num_new));
  if (need > kv_.pool().num_free()) return false;
  auto blocks = kv_.pool().allocate(n);
  MOPT_CHECK(blocks.has_value(), "swap-in allocation failed after the free-count check");
  req->block_table = std::move(*blocks);
  req->num_cached_blocks = 0;
  MOPT_CHECK(kv_.allocate_slots(*req, num_new), "swap-in slots failed after the free-count check");
  for (int i = 0; i < n; ++i) {
    out.swap_in.emplace_back(req->swap_blocks[static_cast<size_t>(i)], req->block_table[static_cast<size_t>(i)]);
    free_swap_.push_back(req->swap_blocks[static_cast<size_t>(i)]);
  }
  req->swap_blocks.clear();
  req->state = RequestState::kRunning;
  running_.push_back(req);
  out.scheduled.push_back({req, num_new, req->num_computed_tokens + num_new == req->num_tokens()});
  budget -= num_new;
  return true;
}

bool Scheduler::try_admit(Request* req, int& budget, SchedulerOutput& out) {
  MOPT_CHECK(req->block_table.empty() && req->num_computed_tokens == 0, "waiting request holds KV");
  KVCacheManager::CachedPrefix prefix = kv_.find_cached_prefix(*req);
  const int num_new = std::min(req->num_tokens() - prefix.num_tokens, budget);
  if (!kv_.allocate_slots(*req, num_new, &prefix)) return false;
  req->num_computed_tokens = prefix.num_tokens;
  out.prefix_queries += static_cast<uint64_t>(req->num_tokens());
  out.prefix_hits += static_cast<uint64_t>(prefix.num_tokens);
  if (!req->admitted_once) {
    req->admitted_once = true;
    req->queue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - req->added_at).count();
    req->num_cached_prompt_tokens = std::min(prefix.num_tokens, req->num_prompt_tokens);
  }
  req->state = RequestState::kRunning;
  running_.push_back(req);
  out.scheduled.push_back({req, num_new, req->num_computed_tokens + num_new == req->num_tokens()});
  budget -= num_new;
  return true;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = cfg_.max_num_batched_tokens;
  std::sort(running_.begin(), running_.end(), order_);

  // (1) Running requests, best first; preempt from the worst end when blocks run out.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* req = running_[i];
    const int num_real = req->num_tokens() - req->num_computed_tokens;
    MOPT_CHECK(num_real > 0, "running request %llu has nothing to compute",
               static_cast<unsigned long long>(req->id));
    // Proposals ride along only behind every real token (so the proposals' rows follow the sampled one).
    const int num_spec = req->spec_tokens.empty() ? 0 : std::clamp(budget - num_real, 0,
                                                                   static_cast<int>(req->spec_tokens.size()));
    req->spec_tokens.resize(static_cast<size_t>(num_spec));
    int num_new = std::min(num_real + num_spec, budget);
    bool scheduled = false;
    for (;;) {
      if (kv_.allocate_slots(*req, num_new)) {
        scheduled = true;
        break;
      }
      if (!req->spec_tokens.empty()) {  // drop the proposals before preempting anyone for them
        req->spec_tokens.clear();
        num_new = std::min(num_real, budget);
        continue;
      }
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim, out);
      if (victim == req) break;
    }
    if (!scheduled) break;
    const int n_spec = static_cast<int>(req->spec_tokens.size());
    out.scheduled.push_back(
        {req, num_new, req->num_computed_tokens + num_new - n_spec == req->num_tokens(), n_spec});
    budget -= num_new;
    ++i;
  }

  // (2) Swapped, then waiting requests, only when nobody was preempted this step (there is no room).
  if (out.num_preempted == 0) {
    bool blocked = false;
    while (!swapped_.empty() && budget > 0 && num_running() < cfg_.max_num_seqs) {
      Request* req = *swapped_.begin();
      if (!try_swap_in(req, budget, out)) {
        blocked = true;
        break;
      }
      swapped_.erase(swapped_.begin());
    }
    while (!blocked && !waiting_.empty() && budget > 0 && num_running() < cfg_.max_num_seqs) {
      Request* req = *waiting_.begin();
      if (!try_admit(req, budget, out)) break;
      waiting_.erase(waiting_.begin());
    }
  }
  out.num_tokens = cfg_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledRequest& s : out.scheduled) {
    Request* req = s.req;
    if (req->state != RequestState::kRunning) continue;  // finished meanwhile
    req->num_computed_tokens += s.num_new_tokens - s.num_spec_tokens;  // proposals: accept_spec_tokens()
    MOPT_CHECK(req->num_computed_tokens <= req->num_tokens(), "computed past the tokens");
    kv_.cache_computed_blocks(*req);
  }
}

void Scheduler::accept_spec_tokens(Request* req, int n_accepted) {
  MOPT_CHECK(req->state == RequestState::kRunning, "accepting proposals of a request that is not running");
  req->num_computed_tokens += n_accepted;
  MOPT_CHECK(req->num_computed_tokens <= req->num_tokens(), "accepted past the tokens");
  req->spec_tokens.clear();
  kv_.trim(*req, req->num_tokens());
  kv_.cache_computed_blocks(*req);
}

void Scheduler::finish(Request* req) {
  switch (req->state) {
    case RequestState::kRunning: {
      auto it = std::find(running_.begin(), running_.end(), req);
      MOPT_CHECK(it != running_.end(), "running request not in the running list");
      running_.erase(it);
      break;
    }
    case RequestState::kWaiting: waiting_.erase(req); break;
    case RequestState::kSwapped: swapped_.erase(req); break;
    case RequestState::kFinished: return;
  }
  kv_.free(*req);
  for (int32_t h : req->swap_blocks) free_swap_.push_back(h);
  req->swap_blocks.clear();
  req->state = RequestState::kFinished;
}

std::vector<Request*> Scheduler::all_requests() const {
  std::vector<Request*> all(running_.begin(), running_.end());
  all.insert(all.end(), waiting_.begin(), waiting_.end());
  all.insert(all.end(), swapped_.begin(), swapped_.end());
  return all;
}

std::string Scheduler::check_invariants() const {
  if (std::string e = kv_.pool().check_invariants(); !e.empty()) return e;
  const int nb = kv_.pool().num_blocks();
  std::vector<int> refs(static_cast<size_t>(nb), 0);
  std::vector<int> host_use(static_cast<size_t>(cfg_.num_swap_blocks), 0);
  for (int32_t h : free_swap_) {
    if (h < 0 || h >= cfg_.num_swap_blocks) return strfmt("free swap block %d out of range", h);
    ++host_use[static_cast<size_t>(h)];
  }
  auto check_req = [&](const Request* r, RequestState want) -> std::string {
    if (r->state != want) return strfmt("request %llu is in the wrong queue", (unsigned long long)r->id);
    const size_t held = want == RequestState::kSwapped ? r->swap_blocks.size() : r->block_table.size();
    const int64_t cap = static_cast<int64_t>(held) * kv_.block_size();
    if (r->num_computed_tokens > cap)
      return strfmt("request %llu has %d computed tokens but blocks for %lld", (unsigned long long)r->id,
                    r->num_computed_tokens, static_cast<long long>(cap));
    if (want != RequestState::kRunning && !r->block_table.empty())
      return strfmt("non-running request %llu holds device blocks", (unsigned long long)r->id);
    if (want == RequestState::kSwapped && (r->swap_blocks.empty() || r->num_computed_tokens == 0))
      return strfmt("swapped request %llu holds no swapped KV", (unsigned long long)r->id);
    if (want != RequestState::kSwapped && !r->swap_blocks.empty())
      return strfmt("request %llu holds swap blocks but is not swapped", (unsigned long long)r->id);
    if (want == RequestState::kWaiting && r->num_computed_tokens != 0)
      return strfmt("waiting request %llu has computed tokens", (unsigned long long)r->id);
    for (int32_t b : r->block_table) {
      if (b < 0 || b >= nb) return strfmt("block %d out of range", b);
      ++refs[static_cast<size_t>(b)];
    }
    for (int32_t h : r->swap_blocks) {
      if (h < 0 || h >= cfg_.num_swap_blocks) return strfmt("swap block %d out of range", h);
      ++host_use[static_cast<size_t>(h)];
    }
    return {};
  };
  for (const Request* r : running_)
    if (std::string e = check_req(r, RequestState::kRunning); !e.empty()) return e;
  for (const Request* r : waiting_)
    if (std::string e = check_req(r, RequestState::kWaiting); !e.empty()) return e;
  for (const Request* r : swapped_)
    if (std::string e = check_req(r, RequestState::kSwapped); !e.empty()) return e;
  for (int b = 0; b < nb; ++b)
    if (refs[static_cast<size_t>(b)] != kv_.pool().ref_count(b))
      return strfmt("block %d has ref %d but %d block tables hold it", b, kv_.pool().ref_count(b),
                    refs[static_cast<size_t>(b)]);
  for (int h = 0; h < cfg_.num_swap_blocks; ++h)
    if (host_use[static_cast<size_t>(h)] != 1)
      return strfmt("swap block %d is used %d times (free list + requests)", h, host_use[static_cast<size_t>(h)]);
  if (num_running() > cfg_.max_num_seqs) return "more running requests than max_num_seqs";
  return {};
}

}  // namespace mopt
