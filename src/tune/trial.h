// One trial of `mopt tune`: a `mopt serve` child with the candidate's flags, driven by the bench engine until the
// planned requests are done, the SLA can no longer be met (EarlyStop), or the trial's time is up. Whatever
// happens to the server (it cannot start, runs out of memory, crashes, hangs) is the trial's result, recorded
// with the end of its log. Evidence per trial: NNN.json (`mopt bench`'s result document: every request, the
// /metrics deltas) and NNN.server.log under <out>/trials/.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tune/drive.h"
#include "tune/search.h"
#include "tune/sla.h"

namespace mopt::tune {

struct TrialOptions {
  std::string binary;                // mopt, to start `mopt serve` with
  std::string out_dir;               // evidence goes to out_dir/trials/
  LoadPlan load;
  double startup_timeout_s = 180;    // model load + engine start
  double trial_timeout_s = 600;      // the whole trial; then the server is killed
  double worse_ratio = 0.5;          // EarlyStop's "clearly worse" (0: off)
  bool sample_gpu = false;
  loadgen::ProgressPrinter::Style progress = loadgen::ProgressPrinter::Style::kOff;
};

struct TrialResult {
  int index = 0;                        // 1, 2, ... in the order trials ran
  std::string key;                      // Settings::key(), or "defaults"
  std::string role;                     // "defaults", "search", "confirm"
  nlohmann::json settings;              // knob -> value as written in the report
  std::vector<std::string> serve_args;  // after "mopt serve"
  std::string status = "ok";            // ok | stopped_early | failed | start_failed | oom | crashed | timeout
  std::string detail;                   // why, for every status but ok
  bool feasible = false;                // ran to the end and met the SLA
  double goodput = 0, request_throughput = 0, output_throughput = 0;  // per second
  double ttft_p99 = NAN, tpot_p99 = NAN, itl_p99 = NAN, e2e_p99 = NAN;  // seconds (NaN: not measured)
  double error_rate = 0, excess = 0;
  int64_t requests = 0, failed = 0;
  std::vector<SlaCheck> checks;
  double startup_s = 0, seconds = 0;    // spawn to ready; the whole trial
  double measured_s = 0;                // the measured phase's wall time (first request to last answer)
  std::string evidence, server_log;     // paths

  bool measured() const { return status == "ok" || status == "stopped_early"; }
  Score score() const;
  nlohmann::json to_json() const;
  static Result<TrialResult> from_json(const nlohmann::json& j);
};

// Runs one trial. `best_goodput`: the best feasible goodput so far (for EarlyStop's "clearly worse"); < 0: never
// stop early (a re-run runs every request, so that its goodput compares with the other re-runs').
TrialResult run_trial(const TrialOptions& opt, const Sla& sla, TrialResult spec, double best_goodput);

}  // namespace mopt::tune
