// The periodic engine-stats line of `mopt serve` (vLLM logs the same figures; --disable-log-stats turns it off):
//
//   stats: prompt 812.4 tokens/s, generation 301.2 tokens/s, running 4, waiting 0, swapped 0, KV cache 12.5%,
//          prefix cache hit rate 40.0%, preemptions +0
//
// Rates and the hit rate are over the interval since the previous line. An idle interval writes nothing.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace mopt::server {

// The line for the interval from `prev` to `cur` (seconds `dt` > 0), or nullopt when the engine was idle through it
// (no tokens, no request running, waiting or swapped at either end).
std::optional<std::string> stats_log_line(const EngineStats& prev, const EngineStats& cur, double dt);

// Writes stats_log_line() every `interval_s` seconds from its own thread until destroyed.
class StatsLogger {
 public:
  // `stats`: a fresh snapshot (Engine::stats); `sink`: where lines go.
  StatsLogger(std::function<EngineStats()> stats, std::function<void(const std::string&)> sink, double interval_s);
  ~StatsLogger();
  StatsLogger(const StatsLogger&) = delete;
  StatsLogger& operator=(const StatsLogger&) = delete;

 private:
  void loop();

  std::function<EngineStats()> stats_;
  std::function<void(const std::string&)> sink_;
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  std::thread thread_;
};

}  // namespace mopt::server
