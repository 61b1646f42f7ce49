// Prometheus metrics of the server (text exposition format 0.0.4), names prefixed "mopt:", every series labelled
// with the served model's name (`model_name`, as vLLM's are). With --metrics-compat vllm the series vLLM exports
// are written too, under vLLM's names ("vllm:..."), so dashboards, alerts and autoscalers written for vLLM read
// mopt unchanged (docs/serve.md lists them).
// Counters and histograms recorded by HTTP threads are lock-free or take a short lock; engine gauges
// (running/waiting/swapped, KV usage, prefix cache, token counters, preemptions, tokens per step) are read from
// EngineStats when /metrics is scraped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mopt::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends "<name>_bucket{[labels,]le=...}", "_sum" and "_count" lines; labels: "" or `k="v"[,...]`.
  void render(const std::string& name, const std::string& help, std::string& out, const std::string& labels = "") const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], last = +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

// How /metrics labels its series and what it writes besides the mopt: series.
struct MetricsCompat {
  bool vllm = false;        // --metrics-compat vllm: vLLM's series too
  std::string model_name;   // the model_name label of every series (the first served model name)
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
  Histogram request_prompt_tokens;      // prompt tokens of each finished request
  Histogram request_generation_tokens;  // generated tokens of each finished request

  void count_finish(FinishReason r);
  // Records a finished request: its reason and token counts.
  void finish_request(const RequestOutput& last);
  // Full exposition text; `stats` is a fresh EngineStats snapshot, `config` the engine's resolved settings (null
  // while the model loads).
  std::string render(const EngineStats& stats, const EngineConfig* config, const MetricsCompat& compat = {}) const;
};

// A Prometheus label value with \, " and newline escaped.
std::string escape_label_value(std::string_view v);
// The shortest decimal text that reads back as `v` ("0.0025", not "0.0025000000000000001"); "+Inf", "-Inf", "NaN".
std::string metric_number(double v);

}  // namespace mopt::server
