// Aggregation and output of bench results: SLA/goodput, per-run summaries, the human summary table and the
// JSON result document (every per-request record included).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen/load.h"
#include "loadgen/monitor.h"
#include "loadgen/stats.h"

namespace mopt::loadgen {

// --slo ttft=500ms,tpot=50ms,e2e=10s,itl=200ms (any subset; a bare number is milliseconds).
// A request is "good" when it succeeded and meets every given bound (itl: its largest gap).
struct SloSpec {
  double ttft_s = -1, tpot_s = -1, e2e_s = -1, itl_s = -1;
  static Result<SloSpec> parse(const std::string& spec);
  bool empty() const { return ttft_s < 0 && tpot_s < 0 && e2e_s < 0 && itl_s < 0; }
  bool met_by(const RequestRecord& r) const;
  std::string to_string() const;
};

struct RunSummary {
  std::string label;
  double load = 0;               // swept value (concurrency or rate)
  double duration_s = 0;         // first request start to last completion
  int64_t completed = 0, failed = 0, not_started = 0;
  std::map<std::string, int64_t> errors;  // error kind -> count
  int64_t input_tokens = 0, output_tokens = 0;
  int64_t usage_reported = 0;    // successful requests whose server reported usage
  double request_throughput = 0, input_throughput = 0, output_throughput = 0;  // per second
  Summary ttft, tpot, itl, e2e;  // seconds
  int64_t good = 0;              // requests meeting the SLO
  double goodput = 0;            // good requests per second
  Summary client_lag;            // when the server echoes send times (fake server)
};

// `completed` counts requests that finished (ok or not); `failed` those with an error.
RunSummary summarize_run(const PhaseResult& phase, const LoadSpec& spec, const SloSpec& slo);

struct RunResult {
  LoadSpec spec;
  PhaseResult phase;
  RunSummary summary;
  MonitorResult monitor;
};

// Latency rows of the summary table (bits; vLLM's --percentile-metrics names: ttft, tpot, itl, e2el).
enum LatencyRows : unsigned { kRowTtft = 1, kRowTpot = 2, kRowItl = 4, kRowE2e = 8, kAllLatencyRows = 15 };
// "ttft,tpot,itl" -> the rows; an unknown name is an error listing the known ones.
Result<unsigned> parse_percentile_metrics(const std::string& list);

// The human summary table of one run (plain text, fixed width), with the latency rows in `rows`.
std::string format_summary(const RunResult& run, const SloSpec& slo, unsigned rows = kAllLatencyRows);
// One line per run for sweeps.
std::string format_sweep_table(const std::vector<RunResult>& runs, const SloSpec& slo);

// The JSON result document.
nlohmann::json results_json(const nlohmann::json& config, const std::vector<RunResult>& runs, const SloSpec& slo);
nlohmann::json summary_json(const RunSummary& s);

}  // namespace mopt::loadgen
