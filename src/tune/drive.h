// Drives a server on this machine with the bench engine (src/loadgen, in-process): a warm-up that is measured
// nowhere, then one measured load phase with /metrics scrapes. `mopt tune` runs one per trial, `mopt gate` one
// per soak; both then read the same RunResult `mopt bench` would print.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "loadgen/load.h"
#include "loadgen/progress.h"
#include "loadgen/report.h"
#include "loadgen/workload.h"

namespace mopt::tune {

struct LoadPlan {
  std::string endpoint = "completions";  // completions | chat
  loadgen::WorkloadOptions workload;
  loadgen::LoadSpec load;                // the measured phase
  int warmup_requests = 8;               // same load shape, results discarded (0: none)
  bool ignore_eos = false;
  double request_timeout_s = 120;
  std::string describe() const;          // "synthetic ..., concurrency=8, 200 requests (+8 warm-up)"
  nlohmann::json to_json() const;
};

struct DriveOptions {
  loadgen::ProgressPrinter::Style progress = loadgen::ProgressPrinter::Style::kOff;
  std::string progress_label = "load";
  bool monitor = true;             // scrape /metrics around and during the measured phase
  bool sample_gpu = false;         // NVML samples (a CUDA server)
  double scrape_interval_s = 1.0;
  loadgen::RecordFn on_record;     // may stop the measured phase early
  std::function<void()> on_measure_start;  // called after the warm-up, just before the measured phase
};

// Warm-up, then the measured phase against host:port. An error only when the load cannot be run at all (bad
// spec, every warm-up request failed); failed requests are part of the result.
Result<loadgen::RunResult> drive(const std::string& host, int port, const LoadPlan& plan,
                                 const loadgen::SloSpec& slo, const DriveOptions& opt);

}  // namespace mopt::tune
