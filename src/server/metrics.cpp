#include "server/metrics.h"

#include <cmath>

#include "core/strfmt.h"

namespace mopt::server {
namespace {

std::string fmt_double(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return strfmt("%.17g", v);
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void scalar(std::string& out, const std::string& name, const char* type, const std::string& help, double v) {
  header(out, name, type, help);
  out += name + " " + fmt_double(v) + "\n";
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5,   5.0,    7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}

}  // namespace

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

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  header(out, name, "histogram", help);
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + fmt_double(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + fmt_double(sum_) + "\n";
  out += name + "_count " + std::to_string(n_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft(latency_buckets()), itl(latency_buckets()), e2e(latency_buckets()), queue_time(latency_buckets()) {}

void ServerMetrics::count_finish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: finished[0].fetch_add(1); return;
    case FinishReason::kLength: finished[1].fetch_add(1); return;
    case FinishReason::kAbort: finished[2].fetch_add(1); return;
    case FinishReason::kError: finished[3].fetch_add(1); return;
    case FinishReason::kNone: return;
  }
}

static const char* kv_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kAuto: return "auto";
    case KvCacheDtype::kFloat32: return "fp32";
    case KvCacheDtype::kFloat16: return "fp16";
  }
  return "?";
}

std::string ServerMetrics::render(const EngineStats& s, const EngineConfig* cfg) const {
  std::string out;
  scalar(out, "mopt:model_loaded", "gauge", "1 when the model is loaded and the engine runs.", cfg ? 1 : 0);
  if (cfg) {
    // The settings the engine runs with (as vLLM's cache_config_info): what `mopt tune` and `mopt gate` check.
    header(out, "mopt:engine_config_info", "gauge", "The engine's resolved settings, as labels (value 1).");
    out += strfmt("mopt:engine_config_info{device=\"%s\",block_size=\"%d\",max_num_seqs=\"%d\","
                  "max_num_batched_tokens=\"%d\",max_model_len=\"%d\",num_blocks=\"%d\",kv_cache_dtype=\"%s\","
                  "prefix_caching=\"%s\",enforce_eager=\"%s\"} 1\n",
                  device_name(cfg->runner.device), cfg->block_size, cfg->max_num_seqs, cfg->max_num_batched_tokens,
                  cfg->max_model_len, s.num_blocks, kv_dtype_name(cfg->runner.kv_cache_dtype),
                  cfg->enable_prefix_caching ? "true" : "false", cfg->runner.enforce_eager ? "true" : "false");
  }
  scalar(out, "mopt:cuda_graphs_enabled", "gauge", "1 when decode steps replay CUDA graphs (CUDA, no --enforce-eager).",
         s.runner.cuda_graphs_enabled ? 1 : 0);
  scalar(out, "mopt:cuda_graphs_captured", "gauge", "CUDA graph instances captured (one per decode batch bucket).",
         s.runner.cuda_graphs);
  scalar(out, "mopt:cuda_graph_launches_total", "counter", "Engine steps that ran as a CUDA graph replay.",
         static_cast<double>(s.runner.cuda_graph_launches));
  if (s.runner.device_memory_used >= 0)
    scalar(out, "mopt:device_memory_used_bytes", "gauge",
           "Memory in use on the GPU, all processes (cudaMemGetInfo: total - free).",
           static_cast<double>(s.runner.device_memory_used));
  scalar(out, "mopt:num_requests_running", "gauge", "Requests in the running batch.", s.running);
  scalar(out, "mopt:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", s.waiting);
  scalar(out, "mopt:num_requests_swapped", "gauge", "Requests swapped out to host memory.", s.swapped);
  scalar(out, "mopt:kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0-1).", s.kv_usage);
  scalar(out, "mopt:kv_cache_num_blocks", "gauge", "KV-cache blocks in the pool.", s.num_blocks);
  scalar(out, "mopt:kv_cache_free_blocks", "gauge", "KV-cache blocks free.", s.free_blocks);
  scalar(out, "mopt:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         static_cast<double>(s.prefix_cache_queries));
  scalar(out, "mopt:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         static_cast<double>(s.prefix_cache_hits));
  scalar(out, "mopt:prompt_tokens_total", "counter", "Prompt tokens processed by the engine.",
         static_cast<double>(s.prompt_tokens));
  scalar(out, "mopt:generation_tokens_total", "counter", "Tokens generated by the engine.",
         static_cast<double>(s.generation_tokens));
  scalar(out, "mopt:num_preemptions_total", "counter", "Requests preempted by the scheduler.",
         static_cast<double>(s.preemptions));
  scalar(out, "mopt:engine_steps_total", "counter", "Engine scheduler steps.", static_cast<double>(s.steps));
  scalar(out, "mopt:warmed_up", "gauge", "1 when the engine's warm-up (GEMM tuning, graph capture) has run.",
         s.warmed_up ? 1 : 0);
  scalar(out, "mopt:gemm_tunings_after_warmup_total", "counter",
         "GEMM shapes timed inside requests' steps after the warm-up (0 when the warm-up covered every shape).",
         static_cast<double>(s.tunings_after_warmup));
  scalar(out, "mopt:graph_captures_after_warmup_total", "counter",
         "CUDA graphs captured inside requests' steps after the warm-up.",
         static_cast<double>(s.captures_after_warmup));

  header(out, "mopt:request_success_total", "counter", "Finished requests by finish reason.");
  static const char* kReasons[] = {"stop", "length", "abort", "error"};
  for (size_t i = 0; i < finished.size(); ++i)
    out += strfmt("mopt:request_success_total{finished_reason=\"%s\"} %llu\n", kReasons[i],
                  static_cast<unsigned long long>(finished[i].load()));
  scalar(out, "mopt:request_prompt_tokens_total", "counter", "Prompt tokens of finished requests (usage).",
         static_cast<double>(prompt_tokens.load()));
  scalar(out, "mopt:request_generation_tokens_total", "counter", "Completion tokens of finished requests (usage).",
         static_cast<double>(generation_tokens.load()));
  scalar(out, "mopt:http_requests_total", "counter", "HTTP requests routed.", static_cast<double>(http_requests.load()));
  header(out, "mopt:http_errors_total", "counter", "HTTP error responses by class.");
  out += strfmt("mopt:http_errors_total{class=\"4xx\"} %llu\n", static_cast<unsigned long long>(http_errors_4xx.load()));
  out += strfmt("mopt:http_errors_total{class=\"5xx\"} %llu\n", static_cast<unsigned long long>(http_errors_5xx.load()));
  scalar(out, "mopt:request_rejected_queue_full_total", "counter", "Requests refused because the queue was full.",
         static_cast<double>(rejected_queue_full.load()));
  scalar(out, "mopt:client_disconnects_total", "counter", "Requests aborted because the client disconnected.",
         static_cast<double>(client_disconnects.load()));

  ttft.render("mopt:time_to_first_token_seconds", "Time from request arrival to its first token.", out);
  itl.render("mopt:inter_token_latency_seconds", "Time between consecutive tokens of a request.", out);
  e2e.render("mopt:e2e_request_latency_seconds", "Time from request arrival to its last token.", out);
  queue_time.render("mopt:request_queue_time_seconds",
                    "Time a request waited in the engine queue before it was first scheduled.", out);
  return out;
}

}  // namespace mopt::server
