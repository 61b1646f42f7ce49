// EngineImpl's warm-up (before serving) and the check that steps after it did not tune or capture any more.
#include <mutex>

#include "core/log.h"
#include "engine/engine_impl.h"

namespace mopt {

Result<WarmupReport> EngineImpl::warmup(const WarmupProgress& progress) {
  std::lock_guard<std::mutex> lk(step_mu_);
  uint64_t steps = 0;
  {
    std::lock_guard<std::mutex> slk(stats_mu_);
    steps = stats_.steps;
  }
  if (thread_.joinable() || steps > 0 || unfinished_.load() > 0)
    return error("Engine::warmup: call it before start() and before the first request");
  MOPT_ASSIGN_OR_RETURN(WarmupReport rep, runner_->warmup(progress));
  tuning_seen_ = runner_->tuning_counters();
  std::lock_guard<std::mutex> slk(stats_mu_);
  stats_.warmed_up = true;
  return rep;
}

// After the warm-up, a step that still tunes GEMMs or captures graphs ran them inside users' requests: say so
// (the step's time includes that work) and count it for /metrics.
void EngineImpl::check_late_tuning(const SchedulerOutput& out, double step_s) {
  const TuningCounters now = runner_->tuning_counters();
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
