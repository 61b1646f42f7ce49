// The thresholds of `mopt gate`'s seven gates. Defaults are the production bar of issue 18; a TOML file
// (`mopt gate --thresholds FILE`) overrides any of them by key:
//
//   leak_mb_per_hour = 0.1     # memory growth after warm-up: the slope's upper confidence bound must stay below
//   leak_confidence  = 0.95    # one-sided confidence of that bound
//   leak_settle      = 0.2     # fraction of the soak's first samples left out of the fit (allocators settling)
//   tail_p999        = "3s"    # P99.9 end-to-end latency at the target load
//   error_rate       = 0       # failed / finished requests
//   restart          = "30s"   # process start to the first successful completion, the slowest of the restarts
//   restarts         = 3       # how many restarts are timed
//   accuracy         = "top1>=0.99,kl<=0.05"   # mopt eval's gate against the baseline model
#pragma once

#include <string>

#include "core/status.h"

namespace mopt::gate {

struct Thresholds {
  double leak_mb_per_hour = 0.1;
  double leak_confidence = 0.95;
  double leak_settle = 0.2;
  double tail_p999_s = 3.0;
  double error_rate = 0.0;
  double restart_s = 30.0;
  int restarts = 3;
  std::string accuracy = "top1>=0.99,kl<=0.05";
};

// Sets one threshold from its TOML key and text value; an unknown key or a bad value is an error naming both.
Status set_threshold(Thresholds& t, const std::string& key, const std::string& value);

}  // namespace mopt::gate
