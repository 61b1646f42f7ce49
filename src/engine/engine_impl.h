// Engine internals: EngineImpl (the Engine), shared by its implementation files (engine.cpp: requests and the
// step loop; engine_warmup.cpp: the warm-up and late-tuning checks; speculative/engine_spec.cpp: proposals and
// their verification) and engine_create.cpp (model -> runner -> engine).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/runner.h"
#include "engine/engine.h"
#include "engine/grammar/matcher.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative/draft_model.h"
#include "tokenizer/tokenizer.h"

namespace mopt {

// An engine over an existing runner (used by Engine::create, by tests with a fake runner, and by custom backends).
// tokenizer may be null: then no text is produced, stop strings are rejected, and `eog_ids` end generation.
// draft: SpecMethod::kDraftModel's proposer, its KV cache allocated here (Engine::create makes it).
Result<std::unique_ptr<Engine>> create_engine_with_runner(std::unique_ptr<ModelRunner> runner,
                                                          const Tokenizer* tokenizer, const EngineConfig& config,
                                                          std::vector<int32_t> eog_ids = {},
                                                          std::unique_ptr<DraftModel> draft = nullptr);

// Test hook for engines made here: cross-checks the scheduler queues, block tables, block pool ref counts, free
// list, prefix-cache map and swap pool. "" when they hold, else the first violation.
std::string check_engine_invariants(Engine& engine);

struct EngineRequest : Request {
  OutputCallback cb;
  SamplerRng rng;
  std::unique_ptr<StreamDecoder> decoder;  // null without a tokenizer
  std::string held_text;                   // decoded, not yet emitted (may be the start of a stop string)
  std::unique_ptr<grammar::Matcher> matcher;  // structured output: where the output is in its grammar

  // Prompt rows (RequestSpec::prompt_logits, SamplingParams::prompt_logprobs): the logits of prompt positions
  // [prompt_rows_done, num_prompt_tokens) are still wanted.
  PromptLogitsCallback prompt_cb;
  int prompt_cb_from = 0;                  // RequestSpec::prompt_logits_from
  int prompt_rows_done = 0;                // positions below it were delivered (or are not wanted)
  std::vector<TokenLogprob> prompt_lp;                // [positions reduced so far] for the first output
  std::vector<std::vector<TokenLogprob>> prompt_top;  // [positions reduced so far][params.prompt_logprobs]
  bool prompt_lp_sent = false;

  bool wants_prompt_rows() const {
    return (prompt_cb || params.prompt_logprobs >= 0) && prompt_rows_done < num_prompt_tokens;
  }
};

// A scheduled request's output rows in the step (indices into the batch's logits_indices).
struct StepRows {
  int first_row = 0;      // its first output row
  int prompt_pos = 0;     // position of its first prompt row
  int n_prompt_rows = 0;  // prompt rows: output rows [first_row, first_row + n_prompt_rows), consecutive positions
  int sample_row = -1;    // the row its next token is sampled from (may be the last prompt row); -1: none
  int n_spec = 0;         // proposals verified: rows sample_row + 1 .. sample_row + n_spec follow proposal i - 1
};

// Why the host sampler has no token to draw for a grammar-constrained request.
enum class NoToken { kNone, kGrammarDone, kDeadEnd };

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<ModelRunner> runner, const Tokenizer* tok, const EngineConfig& cfg,
             const SchedulerConfig& scfg, int num_blocks, std::vector<int32_t> eog_ids,
             std::unique_ptr<DraftModel> draft)
      : runner_(std::move(runner)),
        tok_(tok),
        cfg_(cfg),
        n_vocab_(runner_->config().n_vocab),
        kv_(num_blocks, cfg.block_size, cfg.enable_prefix_caching),
        sched_(scfg, kv_),
        eog_(eog_ids.begin(), eog_ids.end()),
        seed_rng_(cfg.seed ? *cfg.seed
                           : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
        draft_(std::move(draft)) {
    stats_.num_blocks = stats_.free_blocks = num_blocks;
    stats_.block_size = cfg.block_size;
  }
  ~EngineImpl() override { stop(); }

  AddResult add_request(RequestSpec spec, OutputCallback cb) override;
  void abort(uint64_t request_id) override;
  Result<WarmupReport> warmup(const WarmupProgress& progress) override;
  void start() override;
  void stop() override;
  bool step() override;
  bool has_unfinished() const override { return unfinished_.load() > 0; }
  EngineStats stats() const override {
    std::lock_guard<std::mutex> lk(stats_mu_);
    return stats_;
  }
  const EngineConfig& config() const override { return cfg_; }

  std::string check_invariants() {
    std::lock_guard<std::mutex> lk(step_mu_);
    if (std::string e = sched_.check_invariants(); !e.empty()) return e;
    if (sched_.all_requests().size() != requests_.size())
      return strfmt("scheduler holds %zu requests, engine %zu", sched_.all_requests().size(), requests_.size());
    return {};
  }

 private:
  bool step_locked();
  void drain_inbox();
  void build_batch(const SchedulerOutput& out);
  Status run_forward(const SchedulerOutput& out);
  bool needs_host_sampler(const EngineRequest& r) const;
  // The most output rows the runner's forward_sample takes in a step (its max_sample_rows(), else max_num_seqs).
  int device_sample_rows() const {
    const int r = runner_->max_sample_rows();
    return r > 0 ? r : cfg_.max_num_seqs;
  }
  bool stage_device_mask(EngineRequest& r, size_t row);
  void grammar_banned_ids(const EngineRequest& r, std::vector<int32_t>& banned) const;
  SampleResult sample_on_host(EngineRequest& r, float* logits_row, NoToken& why);
  bool deliver_prompt_rows(EngineRequest& r, const StepRows& sr);
  void process_token(EngineRequest& r, SampleResult& s);
  void finish(EngineRequest& r, RequestOutput& o, FinishReason reason, const std::string& error = {});
  void finish_without_token(EngineRequest& r, NoToken why);
  void emit(EngineRequest& r, RequestOutput& o);
  void fail_all(const std::string& error);
  void update_stats(const SchedulerOutput* out);
  void check_late_tuning(const SchedulerOutput& out, double step_s);
  TuningCounters tuning_counters() const;  // the runner's, plus the draft model's runner's
  // After the runner's warm-up: one short greedy request run to completion on this thread (engine_warmup.cpp).
  Status warm_request();
  // Draws the token of output row `row` for `r` (host sampler or the device's pick) into `s`. False when the
  // request finished instead (grammar done or dead end, a bad device pick).
  bool sample_row(EngineRequest& r, int row, SampleResult& s);
  // Speculative decoding (speculative/engine_spec.cpp): proposals for the running requests that caught up, before
  // schedule(); after the forward pass, the verification of a request's proposals (each emitted token through
  // process_token, which counts it).
  void propose_drafts();
  bool can_speculate(const EngineRequest& r) const;
  void verify_drafts(EngineRequest& r, const StepRows& rows);

  std::unique_ptr<ModelRunner> runner_;
  const Tokenizer* tok_;
  EngineConfig cfg_;
  const int n_vocab_;
  KVCacheManager kv_;
  Scheduler sched_;
  std::unordered_set<int32_t> eog_;
  std::unordered_map<uint64_t, std::unique_ptr<EngineRequest>> requests_;  // engine thread only
  uint64_t next_arrival_ = 0;

  // Inbox (any thread).
  std::mutex in_mu_;
  std::condition_variable in_cv_;
  std::vector<std::unique_ptr<EngineRequest>> inbox_;
  std::vector<uint64_t> aborts_;
  SamplerRng seed_rng_;  // seeds for requests without one (under in_mu_)
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int> unfinished_{0};
  bool stopped_ = false;  // under in_mu_

  std::mutex step_mu_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  double last_runtime_poll_s_ = -1e9;  // under stats_mu_
  TuningCounters tuning_seen_;  // tuning_counters() after the warm-up / the last step (engine thread)
  TuningCounters retired_draft_tuning_;  // a failed draft's last counters (it is gone; propose_drafts)

  // Batch buffers, reused across steps.
  BatchArrays barr_;               // the step's batch
  ForwardBatch batch_;             // barr_.view()
  // Output rows [n_out] of the step, in batch order. With device sampling (runner_->can_sample()): the settings
  // of each row, the token the device picked, and which rows the host needs the logits of (prompt rows, rows
  // the host sampler finishes).
  std::vector<StepRows> step_rows_;      // [scheduled] in out.scheduled order
  std::vector<RowSampling> row_params_;  // [n_out]
  std::vector<int32_t> row_tokens_;      // [n_out]
  std::vector<int32_t> host_index_;      // [n_out] row of logits_ holding the row's logits; -1: device-sampled
  std::vector<EngineRequest*> device_rows_;  // [n_out] the request of a device-sampled row, else null
  std::vector<std::span<const uint64_t>> row_allowed_;  // [n_out] a device row's token mask (empty: none)
  std::vector<uint64_t> mask_copies_;    // [n_out, ceil(n_vocab / 64)] masks less banned ids (stage_device_mask)
  std::vector<int32_t> device_banned_;   // stage_device_mask's scratch
  std::vector<int32_t> host_rows_;       // [n_host] output rows whose logits come to the host, increasing
  std::vector<float> logits_;            // [n_host, n_vocab] (every row when the runner cannot sample)
  std::vector<float> row_logprobs_;      // [n_vocab] scratch of the prompt logprobs
  RequestOutput token_out_;              // process_token's output, reused (its buffers keep their capacity)
  std::vector<int32_t> drafts_;          // [num_speculative_tokens] verify_drafts' copy of the proposals
  std::unique_ptr<DraftModel> draft_;    // SpecMethod::kDraftModel's proposer
  std::vector<DraftJob> draft_jobs_;     // propose_drafts' scratch
  std::vector<uint64_t> live_ids_;       // propose_drafts' scratch: the requests' ids, sorted
  uint64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;  // this step's, for update_stats
};

}  // namespace mopt
