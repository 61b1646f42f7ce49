// EngineImpl's warm-up (before serving) and the check that steps after it did not tune or capture any more.
#include <algorithm>
#include <mutex>
#include <string>

#include "core/log.h"
#include "engine/engine_impl.h"

namespace mopt {

Result<WarmupReport> EngineImpl::warmup(const WarmupProgress& progress) {
  WarmupReport rep;
  {
    std::lock_guard<std::mutex> lk(step_mu_);
    uint64_t steps = 0;
    {
      std::lock_guard<std::mutex> slk(stats_mu_);
      steps = stats_.steps;
    }
    if (thread_.joinable() || steps > 0 || unfinished_.load() > 0)
      return error("Engine::warmup: call it before start() and before the first request");
    MOPT_ASSIGN_OR_RETURN(rep, runner_->warmup(progress));
    // A draft model's runner warms its own step shapes (its decode graphs, its GEMM plans and plan cache).
    if (draft_) {
      const WarmupProgress draft_progress = [&](int done, int total, const std::string& what) {
        if (progress) progress(done, total, "draft model: " + what);
      };
      MOPT_ASSIGN_OR_RETURN(const WarmupReport d, draft_->warmup(draft_progress));
      rep.tuning_s += d.tuning_s;
      rep.capture_s += d.capture_s;
      rep.eager_shapes += d.eager_shapes;
      rep.graphs += d.graphs;
      rep.plans_tuned += d.plans_tuned;
      rep.plans_from_cache += d.plans_from_cache;
      if (!d.plan_cache.empty()) rep.plan_cache += "; draft model: " + d.plan_cache;
    }
  }
  // A runner that warmed step shapes (CUDA) serves one request of its own next: a prompt prefilled and two tokens
  // sampled through the same path users' requests take, so what the step shapes do not cover (kernels loaded on
  // first launch, the prefill attention of a real prompt, the device sampler, the output path) is not paid by
  // the first user (docs/warmup.md).
  if (rep.eager_shapes > 0 || rep.graphs > 0) MOPT_TRY(warm_request());
  std::lock_guard<std::mutex> lk(step_mu_);
  tuning_seen_ = tuning_counters();
  std::lock_guard<std::mutex> slk(stats_mu_);
  stats_.warmed_up = true;
  return rep;
}

Status EngineImpl::warm_request() {
  RequestSpec spec;
  const int n_prompt = std::max(1, std::min(32, cfg_.max_model_len / 2));
  for (int i = 0; i < n_prompt; ++i) spec.prompt.push_back(static_cast<int32_t>((1000 + 37 * i) % n_vocab_));
  spec.params.temperature = 0;
  spec.params.max_tokens = 2;
  spec.params.ignore_eos = true;
  bool done = false;
  std::string failure;
  AddResult added = add_request(std::move(spec), [&](const RequestOutput& o) {
    if (!o.finished) return;
    done = true;
    if (o.finish_reason != FinishReason::kLength)
      failure = o.error.empty() ? finish_reason_name(o.finish_reason) : o.error;
  });
  if (added.error != AddError::kNone) return error("the warm-up request was refused: %s", added.message.c_str());
  while (!done)
    if (!step()) break;
  if (!done) return error("the warm-up request did not finish");
  if (!failure.empty()) return error("the warm-up request failed: %s", failure.c_str());
  // Its tokens and steps are not users': the statistics start again from those of a new engine, then the live
  // figures (queue, blocks in use, the runner's) are read again.
  {
    std::lock_guard<std::mutex> slk(stats_mu_);
    const int num_blocks = stats_.num_blocks, block_size = stats_.block_size;
    stats_ = EngineStats{};
    stats_.num_blocks = num_blocks;
    stats_.block_size = block_size;
    last_runtime_poll_s_ = -1e9;  // the next update reads the runner's figures again
  }
  update_stats(nullptr);
  return Status::ok();
}

TuningCounters EngineImpl::tuning_counters() const {
  TuningCounters c = runner_->tuning_counters();
  // A draft that failed is gone (engine_spec.cpp); its last counts stay in, so that the sum never goes back.
  c += draft_ ? draft_->runner().tuning_counters() : retired_draft_tuning_;
  return c;
}

// After the warm-up, a step that still tunes GEMMs or captures graphs ran them inside users' requests: say so
// (the step's time includes that work) and count it for /metrics.
void EngineImpl::check_late_tuning(const SchedulerOutput& out, double step_s) {
  const TuningCounters now = tuning_counters();
  const uint64_t tunings = now.gemm_tunings - tuning_seen_.gemm_tunings;
  const uint64_t captures = now.graph_captures - tuning_seen_.graph_captures;
  tuning_seen_ = now;
  bool warmed = false;
  {
    std::lock_guard<std::mutex> lk(stats_mu_);
    warmed = stats_.warmed_up;
    if (warmed) {
      stats_.tunings_after_warmup += tunings;
      stats_.captures_after_warmup += captures;
    }
  }
  if (warmed && (tunings || captures))
    MOPT_LOG_WARN("engine: a step of %d tokens (%zu sequences) tuned %llu GEMM shapes and captured %llu CUDA "
                  "graphs after the warm-up (%.1f ms); the warm-up missed this shape",
                  out.num_tokens, out.scheduled.size(), static_cast<unsigned long long>(tunings),
                  static_cast<unsigned long long>(captures), step_s * 1e3);
}

}  // namespace mopt
