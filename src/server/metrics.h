// Prometheus metrics of the server (text exposition format 0.0.4), names prefixed "mopt:".
// Counters and histograms recorded by HTTP threads are lock-free or take a short lock; engine gauges
// (running/waiting/swapped, KV usage, prefix cache, token counters, preemptions) are read from EngineStats
// when /metrics is scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mopt::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends "<name>_bucket{le=...}", "_sum" and "_count" lines.
  void render(const std::string& name, const std::string& help, std::string& out) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct ServerMetrics {
  ServerMetrics();

  // Finished requests by reason (stop / length / abort / error), as the engine reported them.
  std::array<std::atomic<uint64_t>, 4> finished{};
  std::atomic<uint64_t> prompt_tokens{0};        // usage.prompt_tokens summed over finished requests
  std::atomic<uint64_t> generation_tokens{0};    // usage.completion_tokens summed over finished requests
  std::atomic<uint64_t> http_requests{0};        // every request routed
  std::atomic<uint64_t> http_errors_4xx{0};
  std::atomic<uint64_t> http_errors_5xx{0};
  std::atomic<uint64_t> rejected_queue_full{0};
  std::atomic<uint64_t> client_disconnects{0};   // requests aborted because the client went away

  Histogram ttft;        // seconds from arrival to the first token
  Histogram itl;         // seconds between consecutive output tokens of a request
  Histogram e2e;         // seconds from arrival to the last token
  Histogram queue_time;  // seconds a request waited in the engine before it was first scheduled

  void count_finish(FinishReason r);
  // Full exposition text; `stats` is a fresh EngineStats snapshot, `config` the engine's resolved settings (null
  // while the model loads).
  std::string render(const EngineStats& stats, const EngineConfig* config) const;
};

}  // namespace mopt::server
