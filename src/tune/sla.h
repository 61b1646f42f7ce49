// The service-level agreement a tuned server must meet: `ttft_p99=500ms,tpot_p99=50ms,error_rate=0`.
// Latency bounds are on a percentile (p50, p90, p95, p99, p999) or the mean of TTFT, TPOT, ITL or E2E over a
// trial's successful requests (percentiles as `mopt bench` computes them); error_rate bounds failed / finished
// requests (a fraction, or a percentage with %). A trial meets the SLA when every bound holds.
//
// Goodput (what the tuner maximizes) is `mopt bench`'s: requests per second that succeeded and met, one by one,
// the latency limits of the SLA (each metric's limit at its highest percentile given), see per_request().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/report.h"

namespace mopt::tune {

struct SlaBound {
  enum class Metric { kTtft, kTpot, kItl, kE2e, kErrorRate };
  Metric metric = Metric::kTtft;
  double percentile = 99;  // 50, 90, 95, 99, 99.9; -1: the mean (latency metrics only)
  double limit = 0;        // seconds, or a fraction for error_rate
  std::string name;        // as written: "ttft_p99"
};

struct SlaCheck {
  std::string name;
  double value = 0, limit = 0;  // seconds or a fraction
  bool met = false;
};

class Sla {
 public:
  static Result<Sla> parse(const std::string& spec);
  const std::vector<SlaBound>& bounds() const { return bounds_; }
  std::string to_string() const;
  // The per-request limits goodput counts against.
  loadgen::SloSpec per_request() const;
  // Every bound against a run's summary. A run with no successful request meets no latency bound.
  std::vector<SlaCheck> check(const loadgen::RunSummary& s) const;
  bool met(const loadgen::RunSummary& s) const;
  // How far a run is from meeting the SLA: the largest value / limit over the bounds (<= 1 when met; error_rate
  // counts as 1 + the rate above its limit). Ranks candidates while none meets the SLA.
  double excess(const loadgen::RunSummary& s) const;

 private:
  std::vector<SlaBound> bounds_;
};

// Stops a trial's load phase once it cannot meet the SLA or is clearly worse than the best trial so far
// (loadgen's RecordFn). Percentile bound p on n planned requests: once more than n - floor((n - 1) p / 100)
// requests exceed the limit, the type-7 percentile exceeds it whatever the remaining requests do. Error rate r:
// once errors exceed r x n. "Clearly worse": after a third of the requests (and at least 20), the goodput so
// far is below `worse_ratio` x the best feasible goodput (0 turns this off).
class EarlyStop {
 public:
  EarlyStop(const Sla& sla, int64_t planned_requests, double best_goodput, double worse_ratio);
  bool on_record(const loadgen::RequestRecord& r);  // true: stop the phase
  const std::string& reason() const { return reason_; }

 private:
  const Sla& sla_;
  loadgen::SloSpec per_request_;
  int64_t planned_;
  double best_goodput_, worse_ratio_;
  std::vector<int64_t> over_;  // [bounds] requests over each bound's limit
  int64_t seen_ = 0, failed_ = 0, good_ = 0;
  double first_start_s_ = -1, last_end_s_ = 0;
  std::string reason_;
};

}  // namespace mopt::tune
