#include "server/metrics.h"

#include <charconv>
#include <cmath>

#include "core/strfmt.h"

namespace mopt::server {
namespace {

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// "name{labels}" or "name" when there are none.
std::string series(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

std::string joined(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + "," + b; }

// Cumulative buckets, sum and count of one histogram; counts are per bucket, bounds.size() + 1 of them.
void histogram_lines(const std::string& name, const std::string& help, const std::string& labels,
                     std::span<const double> bounds, std::span<const uint64_t> counts, double sum, uint64_t n,
                     std::string& out) {
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += counts[i];
    out += series(name + "_bucket", joined(labels, "le=\"" + metric_number(bounds[i]) + "\"")) + " " +
           std::to_string(cum) + "\n";
  }
  cum += counts[bounds.size()];
  out += series(name + "_bucket", joined(labels, "le=\"+Inf\"")) + " " + std::to_string(cum) + "\n";
  out += series(name + "_sum", labels) + " " + metric_number(sum) + "\n";
  out += series(name + "_count", labels) + " " + std::to_string(n) + "\n";
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,    7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}

// 1, 2, 5, 10, 20, 50, ... up to 1,000,000 tokens (vLLM buckets token counts 1-2-5 too).
std::vector<double> token_buckets() {
  std::vector<double> b;
  for (double d = 1; d <= 1e6; d *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * d <= 1e6) b.push_back(m * d);
  return b;
}

constexpr const char* kReasons[] = {"stop", "length", "abort", "error"};

}  // namespace

std::string metric_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  if (!std::isfinite(v)) return;
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out,
                       const std::string& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  histogram_lines(name, help, labels, bounds_, counts_, sum_, n_, out);
}

ServerMetrics::ServerMetrics()
    : ttft(latency_buckets()), itl(latency_buckets()), e2e(latency_buckets()), queue_time(latency_buckets()),
      request_prompt_tokens(token_buckets()), request_generation_tokens(token_buckets()) {}

void ServerMetrics::count_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: finished[0].fetch_add(1); return;
    case FinishReason::kLength: finished[1].fetch_add(1); return;
    case FinishReason::kAbort: finished[2].fetch_add(1); return;
    case FinishReason::kError: finished[3].fetch_add(1); return;
    case FinishReason::kNone: return;
  }
}

void ServerMetrics::finish_request(const RequestOutput& o) {
  count_finish(o.finish_reason);
  const int pt = std::max(0, o.prompt_tokens), gt = std::max(0, o.completion_tokens);
  prompt_tokens.fetch_add(static_cast<uint64_t>(pt));
  generation_tokens.fetch_add(static_cast<uint64_t>(gt));
  request_prompt_tokens.observe(pt);
  request_generation_tokens.observe(gt);
}

std::string ServerMetrics::render(const EngineStats& s, const EngineConfig* cfg, const MetricsCompat& compat) const {
  // One row per gauge or counter: its mopt: name, and vLLM's name for the same quantity (nullptr: none; a row
  // without a mopt: name is written for vLLM only, e.g. the V0 name of a V1 series).
  struct Row {
    const char* name;
    const char* vllm;
    const char* type;
    const char* help;
    double value;
  };
  const auto u = [](uint64_t v) { return static_cast<double>(v); };
  const Row rows[] = {
      {"model_loaded", nullptr, "gauge", "1 when the model is loaded and the engine runs.", cfg ? 1.0 : 0.0},
      {"cuda_graphs_enabled", nullptr, "gauge", "1 when decode steps replay CUDA graphs (CUDA, no --enforce-eager).",
       s.runner.cuda_graphs_enabled ? 1.0 : 0.0},
      {"cuda_graphs_captured", nullptr, "gauge", "CUDA graph instances captured (one per decode batch bucket).",
       1.0 * s.runner.cuda_graphs},
      {"cuda_graph_launches_total", nullptr, "counter", "Engine steps that ran as a CUDA graph replay.",
       u(s.runner.cuda_graph_launches)},
      {"num_requests_running", "num_requests_running", "gauge", "Requests in the running batch.", 1.0 * s.running},
      {"num_requests_waiting", "num_requests_waiting", "gauge", "Requests waiting to be scheduled.", 1.0 * s.waiting},
      {"num_requests_swapped", "num_requests_swapped", "gauge", "Requests swapped out to host memory.",
       1.0 * s.swapped},
      {"kv_cache_usage_perc", "kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0-1).",
       s.kv_usage},
      {nullptr, "gpu_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0-1; vLLM V0's name).",
       s.kv_usage},
      {"kv_cache_num_blocks", nullptr, "gauge", "KV-cache blocks in the pool.", 1.0 * s.num_blocks},
      {"kv_cache_free_blocks", nullptr, "gauge", "KV-cache blocks free.", 1.0 * s.free_blocks},
      {"prefix_cache_queries_total", "prefix_cache_queries_total", "counter",
       "Prompt tokens looked up in the prefix cache.", u(s.prefix_cache_queries)},
      {"prefix_cache_hits_total", "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
       u(s.prefix_cache_hits)},
      {"prompt_tokens_total", "prompt_tokens_total", "counter", "Prompt tokens processed by the engine.",
       u(s.prompt_tokens)},
      {"generation_tokens_total", "generation_tokens_total", "counter", "Tokens generated by the engine.",
       u(s.generation_tokens)},
      {"num_preemptions_total", "num_preemptions_total", "counter", "Requests preempted by the scheduler.",
       u(s.preemptions)},
      {"spec_decode_num_drafts_total", "spec_decode_num_drafts_total", "counter",
       "Speculative decoding: verification rounds (a sequence's proposals verified in one step).",
       u(s.spec_num_drafts)},
      {"spec_decode_num_draft_tokens_total", "spec_decode_num_draft_tokens_total", "counter",
       "Speculative decoding: tokens proposed and verified.", u(s.spec_num_draft_tokens)},
      {"spec_decode_num_accepted_tokens_total", "spec_decode_num_accepted_tokens_total", "counter",
       "Speculative decoding: proposed tokens the target model accepted.", u(s.spec_num_accepted_tokens)},
      {"spec_decode_mean_acceptance_length", nullptr, "gauge",
       "Speculative decoding: tokens per verification round, 1 + accepted / rounds (0 before the first round).",
       s.spec_num_drafts ? 1.0 + u(s.spec_num_accepted_tokens) / u(s.spec_num_drafts) : 0.0},
      {"engine_steps_total", nullptr, "counter", "Engine scheduler steps.", u(s.steps)},
      {"warmed_up", nullptr, "gauge", "1 when the engine's warm-up (GEMM tuning, graph capture) has run.",
       s.warmed_up ? 1.0 : 0.0},
      {"gemm_tunings_after_warmup_total", nullptr, "counter",
       "GEMM shapes timed or searched (cuBLASLt heuristic) inside requests' steps after the warm-up (0 when "
       "the warm-up covered every shape).",
       u(s.tunings_after_warmup)},
      {"graph_captures_after_warmup_total", nullptr, "counter",
       "CUDA graphs captured inside requests' steps after the warm-up.", u(s.captures_after_warmup)},
      {"request_prompt_tokens_total", nullptr, "counter", "Prompt tokens of finished requests (usage).",
       u(prompt_tokens.load())},
      {"request_generation_tokens_total", nullptr, "counter", "Completion tokens of finished requests (usage).",
       u(generation_tokens.load())},
      {"http_requests_total", nullptr, "counter", "HTTP requests routed.", u(http_requests.load())},
      {"request_rejected_queue_full_total", nullptr, "counter", "Requests refused because the queue was full.",
       u(rejected_queue_full.load())},
      {"client_disconnects_total", nullptr, "counter", "Requests aborted because the client disconnected.",
       u(client_disconnects.load())},
  };
  struct Hist {
    const Histogram& h;
    const char* name;
    const char* vllm;
    const char* help;
  };
  const Hist hists[] = {
      {ttft, "time_to_first_token_seconds", "time_to_first_token_seconds",
       "Time from request arrival to its first token."},
      {itl, "inter_token_latency_seconds", "inter_token_latency_seconds",
       "Time between consecutive tokens of a request."},
      {itl, nullptr, "time_per_output_token_seconds",
       "Time between consecutive tokens of a request (vLLM's older name)."},
      {e2e, "e2e_request_latency_seconds", "e2e_request_latency_seconds",
       "Time from request arrival to its last token."},
      {queue_time, "request_queue_time_seconds", "request_queue_time_seconds",
       "Time a request waited in the engine queue before it was first scheduled."},
      {request_prompt_tokens, "request_prompt_tokens", "request_prompt_tokens", "Prompt tokens of finished requests."},
      {request_generation_tokens, "request_generation_tokens", "request_generation_tokens",
       "Generated tokens of finished requests."},
  };
  const std::string step_help = "Tokens computed by one engine step.";

  // Writes every series under `prefix` ("mopt:" or "vllm:"), each labelled with model_name.
  std::string out;
  const std::string labels = "model_name=\"" + escape_label_value(compat.model_name) + "\"";
  const auto write = [&](bool vllm) {
    const std::string prefix = vllm ? "vllm:" : "mopt:";
    for (const Row& r : rows) {
      const char* n = vllm ? r.vllm : r.name;
      if (!n) continue;
      header(out, prefix + n, r.type, r.help);
      out += series(prefix + n, labels) + " " + metric_number(r.value) + "\n";
    }
    header(out, prefix + "request_success_total", "counter", "Finished requests by finish reason.");
    for (size_t i = 0; i < finished.size(); ++i)
      out += series(prefix + "request_success_total",
                    joined(labels, strfmt("finished_reason=\"%s\"", kReasons[i]))) +
             " " + std::to_string(finished[i].load()) + "\n";
    for (const Hist& h : hists)
      if (const char* n = vllm ? h.vllm : h.name) h.h.render(prefix + n, h.help, out, labels);
    histogram_lines(prefix + "iteration_tokens_total", step_help, labels, kStepTokenBounds, s.step_tokens_counts,
                    u(s.step_tokens_sum), s.steps, out);
    if (vllm) return;
    if (s.runner.device_memory_used >= 0) {
      header(out, "mopt:device_memory_used_bytes", "gauge",
             "Memory in use on the GPU, all processes (cudaMemGetInfo: total - free).");
      out += series("mopt:device_memory_used_bytes", labels) + " " + std::to_string(s.runner.device_memory_used) +
             "\n";
    }
    if (cfg) {
      // The settings the engine runs with (as vLLM's cache_config_info): what `mopt tune` and `mopt gate` check.
      header(out, "mopt:engine_config_info", "gauge", "The engine's resolved settings, as labels (value 1).");
      out += strfmt("mopt:engine_config_info{%s,device=\"%s\",block_size=\"%d\",max_num_seqs=\"%d\","
                    "max_num_batched_tokens=\"%d\",max_model_len=\"%d\",num_blocks=\"%d\",kv_cache_dtype=\"%s\","
                    "prefix_caching=\"%s\",enforce_eager=\"%s\",speculative_method=\"%s\","
                    "num_speculative_tokens=\"%d\"} 1\n",
                    labels.c_str(), device_name(cfg->runner.device), cfg->block_size, cfg->max_num_seqs,
                    cfg->max_num_batched_tokens, cfg->max_model_len, s.num_blocks,
                    kv_cache_dtype_name(cfg->runner.kv_cache_dtype), cfg->enable_prefix_caching ? "true" : "false",
                    cfg->runner.enforce_eager ? "true" : "false", spec_method_name(cfg->speculative.method),
                    cfg->speculative.num_speculative_tokens);
    }
    header(out, "mopt:http_errors_total", "counter", "HTTP error responses by class.");
    out += series("mopt:http_errors_total", joined(labels, "class=\"4xx\"")) + " " +
           std::to_string(http_errors_4xx.load()) + "\n";
    out += series("mopt:http_errors_total", joined(labels, "class=\"5xx\"")) + " " +
           std::to_string(http_errors_5xx.load()) + "\n";
  };
  write(false);
  if (compat.vllm) write(true);
  return out;
}

}  // namespace mopt::server
