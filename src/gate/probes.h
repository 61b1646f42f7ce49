// What `mopt gate` measures on real `mopt serve` children (tune/server_process.h): restarts (process start to
// the first successful completion) and a soak (warm-up, then the target load for a while, with the server's
// memory sampled throughout), plus a start that must be refused.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/prometheus.h"
#include "loadgen/report.h"
#include "tune/drive.h"

namespace mopt::gate {

struct ServerSpec {
  std::string binary;              // mopt
  std::vector<std::string> args;   // after "serve"
  double startup_timeout_s = 300;
  std::string log_dir;             // server logs go here
};

struct RestartTimes {
  std::vector<double> seconds;     // per restart: spawn to the end of the first successful completion
  std::vector<double> ready_s;     // per restart: spawn to /health 200
};
// Starts the server n times, one after the other. An error when a start fails or no completion succeeds
// within the startup timeout (the log's end is quoted).
Result<RestartTimes> time_restarts(const ServerSpec& s, int n, const tune::LoadPlan& load);

struct MemorySample {
  double t_s = 0;                  // seconds since the soak's measured phase began
  double rss_bytes = 0;            // VmRSS of the server
  double anon_bytes = 0;           // its RssAnon (tune::ProcessMemory): the leak gate's host series
  double device_bytes = NAN;       // mopt:device_memory_used_bytes from /metrics (NaN: not reported)
};

struct SoakResult {
  loadgen::RunResult run;                 // the measured phase
  std::vector<MemorySample> samples;      // every sample_interval_s of the measured phase
  double peak_rss_bytes = 0;
  loadgen::MetricsSnapshot final_metrics; // /metrics after the soak
  bool metrics_ok = false;
  std::string server_log;
};
// Runs the load plan (duration-bound) against a fresh server, sampling its memory.
Result<SoakResult> run_soak(const ServerSpec& s, const tune::LoadPlan& load, double sample_interval_s,
                            loadgen::ProgressPrinter::Style progress, bool sample_gpu);

struct RefusalResult {
  bool refused = false;            // the server exited non-zero without ever answering /health with 200
  std::string outcome;             // "exit 1 after 0.4 s: <its message>" / "it started and served"
};
// Starts the server with extra arguments that must make it refuse to start.
RefusalResult expect_refusal(const ServerSpec& s, const std::vector<std::string>& extra_args);

}  // namespace mopt::gate
