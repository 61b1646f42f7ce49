// `mopt tune`: the serving settings with the highest goodput under an SLA. Measures serve's defaults first (the
// baseline), then runs a coordinate search (search.h) over the search space (space.h) seeded by the memory and
// workload limits, one `mopt serve` child per trial (trial.h), each trial logged as it ends (trial_log.h, what
// --resume continues), and finally re-runs the winner once to show its goodput reproduces. Writes to the output
// directory: best.toml (for `mopt serve --config`), report.html, report.svg, report.md, trials.jsonl and
// trials/NNN.{json,server.log}. See docs/tune.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tune/report.h"
#include "tune/settings.h"
#include "tune/trial.h"

namespace mopt::tune {

struct TuneOptions {
  std::vector<std::string> models;  // -m, one or more variants (weight formats) of one model
  FixedSettings fixed;
  TrialOptions trial;               // binary, output directory, load plan, timeouts, early stopping
  std::string slo = "ttft_p99=500ms,tpot_p99=50ms,error_rate=0";
  int max_trials = 0;               // 0: no limit (then time_budget_s must be set)
  double time_budget_s = 0;         // stop starting search trials after this long (0: no limit)
  bool resume = false;
  int confirm_runs = 1;             // at the end, re-run the winner and the defaults this many times, alternately
  int finalists = 1;                // > 1: re-run that many best trials first; the winner by their re-runs' medians
  double min_gain = 0.03;           // a move must raise goodput by this fraction
  std::vector<std::pair<std::string, std::string>> search;  // --search knob=v1,v2,...
  bool progress_lines = true;       // one line per trial on stderr
};

struct TuneOutcome {
  TuneReport report;
  bool found = false;  // some trial met the SLA (best.toml written)
};

Result<TuneOutcome> run_tune(const TuneOptions& opt);

}  // namespace mopt::tune
