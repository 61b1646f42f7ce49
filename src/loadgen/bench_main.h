// `mopt bench` orchestration: option struct, warm-up, load runs and sweeps, server monitoring, outputs.
#pragma once

#include <string>
#include <vector>

#include "loadgen/load.h"
#include "loadgen/progress.h"
#include "loadgen/report.h"
#include "loadgen/workload.h"
#include "core/status.h"

namespace mopt::loadgen {

struct BenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string endpoint = "completions";  // completions | chat
  Target target;                         // model, api key, ignore_eos, extra body, timeout (host/port/path from url)
  LoadSpec load;                         // base load (mode, concurrency or rate, ...)
  std::vector<double> sweep;             // values of the load parameter to sweep (empty: one run)
  std::string warmup = "0";              // N requests or a duration ("5s")
  WorkloadOptions workload;
  std::string slo;
  bool metrics = true;
  std::string metrics_prefix = "mopt:";
  double scrape_interval_s = 1.0;
  bool gpu = true;
  std::string output_json, svg_dir, html;
  unsigned latency_rows = kAllLatencyRows;  // --percentile-metrics: the summary table's latency rows
  ProgressPrinter::Style progress = ProgressPrinter::Style::kAuto;
};

// Runs everything and prints the summary to stdout. Returns the runs (also written as requested).
Result<std::vector<RunResult>> run_bench(BenchOptions opts);

// Parses "1,2,4,8" (numbers > 0; "inf" allowed when allow_inf).
Result<std::vector<double>> parse_list(const std::string& s, bool allow_inf);

}  // namespace mopt::loadgen
