// EngineImpl's speculative decoding (docs/speculative.md): proposals before the step, verification after it.
//
// Verification draws the target's token at each proposal's position with the request's ordinary sampler, in
// order, and keeps proposal i while the draw equals it; the first draw that differs (or the draw after the last
// proposal) is the step's last token. For a proposer whose draft distribution is a point mass on its proposal t
// (n-gram lookup, a draft model's greedy continuation), this is exactly speculative rejection sampling: t is
// accepted with probability p(t), and a rejection returns a draw from p restricted to tokens != t, renormalized
// (the residual max(0, p - q)). So the output follows the target's distribution, and greedy output equals
// non-speculative greedy output. Each row is sampled with the request's context as it is at that point (the
// accepted proposals appended), so penalties, min_tokens, grammars and logprobs see what they would have seen
// without speculation.
#include <algorithm>
#include <limits>

#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine/speculative/ngram_proposer.h"

namespace mopt {

bool EngineImpl::can_speculate(const EngineRequest& r) const {
  // Caught up (its next step is a decode step) and past its prompt rows.
  return r.state == RequestState::kRunning && r.num_computed_tokens == r.num_tokens() - 1 &&
         !r.wants_prompt_rows();
}

void EngineImpl::propose_drafts() {
  const SpeculativeConfig& sc = cfg_.speculative;
  // A device sampler (CUDA) takes at most device_sample_rows() rows a step (max_num_seqs + k); a step with more
  // is sampled on the host from the full logits, which costs little for up to kHostLogits floats (a batch's rows
  // of a small vocabulary) and a lot beyond. So proposals get the rows that every request's own next token leaves
  // free under the larger of the two. The CPU runner's picks are an argmax over logits it holds anyway: no limit.
  constexpr int64_t kHostLogits = int64_t{1} << 22;
  int64_t free_rows = std::numeric_limits<int64_t>::max();
  if (runner_->can_sample() && runner_->device() != DeviceKind::kCpu)
    free_rows = std::max<int64_t>(device_sample_rows(), kHostLogits / n_vocab_) -
                static_cast<int64_t>(requests_.size());
  // disable_by_batch_size: no proposals while that many requests or more are running.
  if (sc.disable_by_batch_size > 0 && sched_.num_running() >= sc.disable_by_batch_size) free_rows = 0;
  draft_jobs_.clear();
  for (auto& [id, rp] : requests_) {
    EngineRequest& r = *rp;
    r.spec_tokens.clear();
    if (sc.method == SpecMethod::kNone || free_rows <= 0 || !can_speculate(r)) continue;
    // Room for the proposals and the token after them within max_tokens (hence within max_model_len).
    const int k = static_cast<int>(std::min<int64_t>(
        std::min(sc.num_speculative_tokens, r.params.max_tokens - r.num_output_tokens() - 1), free_rows));
    if (k <= 0) continue;
    switch (sc.method) {
      case SpecMethod::kNgram:
        propose_ngram(r.tokens, sc.prompt_lookup_min, sc.prompt_lookup_max, k, r.spec_tokens);
        free_rows -= static_cast<int64_t>(r.spec_tokens.size());
        break;
      case SpecMethod::kDraftModel:
        draft_jobs_.push_back({id, r.tokens, k, &r.spec_tokens});
        free_rows -= k;
        break;
      case SpecMethod::kNone: break;
    }
  }
  if (sc.method != SpecMethod::kDraftModel || !draft_) return;
  // The draft forgets requests that are gone; its forward passes run here, before the step's.
  live_ids_.clear();
  for (const auto& [id, rp] : requests_) live_ids_.push_back(id);
  std::sort(live_ids_.begin(), live_ids_.end());
  draft_->retain(live_ids_);
  if (draft_jobs_.empty()) return;
  if (Status st = draft_->propose(draft_jobs_); !st) {
    // The target does not need the draft: serving goes on without proposals, and says so once.
    MOPT_LOG_ERROR("draft model: %s; speculative decoding is off from now on", st.message().c_str());
    for (const DraftJob& j : draft_jobs_) j.out->clear();
    retired_draft_tuning_ = draft_->runner().tuning_counters();
    draft_.reset();
  }
}

void EngineImpl::verify_drafts(EngineRequest& r, const StepRows& rows) {
  const uint64_t id = r.id;
  drafts_.assign(r.spec_tokens.begin(), r.spec_tokens.end());
  const int k = rows.n_spec;
  MOPT_CHECK(static_cast<int>(drafts_.size()) == k, "request %llu: %zu proposals scheduled as %d",
             static_cast<unsigned long long>(id), drafts_.size(), k);
  ++spec_drafts_;
  spec_draft_tokens_ += static_cast<uint64_t>(k);
  int accepted = 0;
  for (int i = 0; i <= k; ++i) {
    SampleResult sr;
    if (!sample_row(r, rows.sample_row + i, sr)) break;  // finished without a token
    const bool match = i < k && sr.token == drafts_[static_cast<size_t>(i)];
    process_token(r, sr);
    if (requests_.find(id) == requests_.end()) break;  // finished (stop, length): r is gone
    if (!match) break;
    ++accepted;
  }
  spec_accepted_ += static_cast<uint64_t>(accepted);
  if (requests_.find(id) != requests_.end()) sched_.accept_spec_tokens(&r, accepted);
}

}  // namespace mopt
