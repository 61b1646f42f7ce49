#include "server/stats_log.h"

#include <chrono>

#include "core/strfmt.h"

namespace mopt::server {

std::optional<std::string> stats_log_line(const EngineStats& prev, const EngineStats& cur, double dt) {
  const auto delta = [](uint64_t a, uint64_t b) { return b >= a ? b - a : 0; };  // counters never go back
  const uint64_t prompt = delta(prev.prompt_tokens, cur.prompt_tokens);
  const uint64_t gen = delta(prev.generation_tokens, cur.generation_tokens);
  const bool busy = cur.running + cur.waiting + cur.swapped + prev.running + prev.waiting + prev.swapped > 0;
  if (prompt == 0 && gen == 0 && !busy) return std::nullopt;
  const uint64_t queries = delta(prev.prefix_cache_queries, cur.prefix_cache_queries);
  const uint64_t hits = delta(prev.prefix_cache_hits, cur.prefix_cache_hits);
  return strfmt("stats: prompt %.1f tokens/s, generation %.1f tokens/s, running %d, waiting %d, swapped %d, "
                "KV cache %.1f%%, prefix cache hit rate %.1f%%, preemptions +%llu",
                static_cast<double>(prompt) / dt, static_cast<double>(gen) / dt, cur.running, cur.waiting,
                cur.swapped, 100.0 * cur.kv_usage,
                queries ? 100.0 * static_cast<double>(hits) / static_cast<double>(queries) : 0.0,
                static_cast<unsigned long long>(delta(prev.preemptions, cur.preemptions)));
}

StatsLogger::StatsLogger(std::function<EngineStats()> stats, std::function<void(const std::string&)> sink,
                         double interval_s)
    : stats_(std::move(stats)), sink_(std::move(sink)), interval_s_(interval_s), thread_([this] { loop(); }) {}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StatsLogger::loop() {
  using Clock = std::chrono::steady_clock;
  EngineStats prev = stats_();
  auto t_prev = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, std::chrono::duration<double>(interval_s_), [this] { return stop_; })) {
    lk.unlock();
    EngineStats cur = stats_();
    const auto now = Clock::now();
    if (auto line = stats_log_line(prev, cur, std::chrono::duration<double>(now - t_prev).count())) sink_(*line);
    prev = cur;
    t_prev = now;
    lk.lock();
  }
}

}  // namespace mopt::server
