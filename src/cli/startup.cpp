#include "cli/startup.h"

#include <chrono>

#include "core/progress_bar.h"
#include "core/strfmt.h"

namespace mopt::cli {

Result<std::unique_ptr<Engine>> create_engine(const Model& model, const Tokenizer& tokenizer, EngineConfig config,
                                              const std::function<void(const std::string&)>& phase) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ProgressBar bar(ProgressBar::auto_style(true), "load", "bytes", 2.0);
  bool shown = false;
  config.runner.load_progress = [&](uint64_t done, uint64_t total) {
    bar.update(static_cast<int64_t>(done), static_cast<int64_t>(total),
               std::chrono::duration<double>(Clock::now() - t0).count());
    shown = true;
    if (!phase) return;
    const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
    phase(strfmt("weight upload %.0f%% (%s of %s bytes)", pct, format_count(static_cast<int64_t>(done)).c_str(),
                 format_count(static_cast<int64_t>(total)).c_str()));
  };
  auto engine = Engine::create(model, tokenizer, config);
  if (shown) bar.finish();
  return engine;
}

Status warm_up_engine(Engine& engine, StartupTimes& times, const std::function<void(const std::string&)>& phase) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ProgressBar bar(ProgressBar::auto_style(true), "warm-up", "steps", 2.0);
  bool shown = false;
  auto progress = [&](int done, int total, const std::string& what) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    bar.update(done, total, s);
    shown = true;
    if (phase) phase(strfmt("warm-up %d/%d: %s", done, total, what.c_str()));
  };
  auto rep = engine.warmup(progress);
  if (shown) bar.finish();
  times.warmup_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!rep) return rep.status().with_context("warm-up");
  times.warm = *rep;
  return Status::ok();
}

std::string format_startup(const StartupTimes& t) {
  const WarmupReport& w = t.warm;
  std::string warm;
  if (w.eager_shapes == 0 && w.graphs == 0) {
    warm = "nothing to warm on this backend";
  } else {
    warm = strfmt("tuning %.2f s, graph capture %.2f s; %d step shapes, %d graphs; %llu GEMM plans tuned, %llu from "
                  "the plan cache; plan cache: %s",
                  w.tuning_s, w.capture_s, w.eager_shapes, w.graphs, static_cast<unsigned long long>(w.plans_tuned),
                  static_cast<unsigned long long>(w.plans_from_cache), w.plan_cache.c_str());
  }
  return strfmt("startup: read weights %.2f s, engine (weight upload, KV cache) %.2f s, warm-up %.2f s (%s)",
                t.read_s, t.engine_s, t.warmup_s, warm.c_str());
}

}  // namespace mopt::cli
