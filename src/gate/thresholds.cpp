#include "gate/thresholds.h"

#include "loadgen/stats.h"

namespace mopt::gate {

Status set_threshold(Thresholds& t, const std::string& key, const std::string& value) {
  auto number = [&](double lo, double hi) -> Result<double> {
    auto v = loadgen::parse_number(value);
    if (!v || !(*v >= lo && *v <= hi))
      return error("threshold %s = '%s': expected a number in [%g, %g]", key.c_str(), value.c_str(), lo, hi);
    return *v;
  };
  auto seconds = [&]() -> Result<double> {
    auto v = loadgen::parse_duration(value, 1);
    if (!v || !(*v > 0)) return error("threshold %s = '%s': expected a duration > 0 (e.g. 3s, 500ms)", key.c_str(),
                                      value.c_str());
    return *v;
  };
  if (key == "leak_mb_per_hour") {
    MOPT_ASSIGN_OR_RETURN(t.leak_mb_per_hour, number(0, 1e9));
  } else if (key == "leak_confidence") {
    MOPT_ASSIGN_OR_RETURN(t.leak_confidence, number(0.5, 0.9999));
  } else if (key == "leak_settle") {
    MOPT_ASSIGN_OR_RETURN(t.leak_settle, number(0, 0.9));
  } else if (key == "tail_p999") {
    MOPT_ASSIGN_OR_RETURN(t.tail_p999_s, seconds());
  } else if (key == "error_rate") {
    MOPT_ASSIGN_OR_RETURN(t.error_rate, number(0, 1));
  } else if (key == "restart") {
    MOPT_ASSIGN_OR_RETURN(t.restart_s, seconds());
  } else if (key == "restarts") {
    MOPT_ASSIGN_OR_RETURN(double n, number(1, 100));
    if (n != static_cast<int>(n)) return error("threshold restarts = '%s': expected a whole number", value.c_str());
    t.restarts = static_cast<int>(n);
  } else if (key == "accuracy") {
    if (value.empty()) return error("threshold accuracy is empty (e.g. \"top1>=0.99,kl<=0.05\")");
    t.accuracy = value;
  } else {
    return error("unknown threshold '%s' (the keys: leak_mb_per_hour, leak_confidence, leak_settle, tail_p999, error_rate, "
                 "restart, restarts, accuracy)", key.c_str());
  }
  return Status::ok();
}

}  // namespace mopt::gate
