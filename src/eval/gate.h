// Accuracy gates over an evaluation: "top1>=0.995,kl<=0.01,ppl_delta<=0.5". `mopt eval --gate` and `mopt gate`
// parse one with parse_gate() and check an EvalMetrics with apply_gate(); docs/eval.md lists the metrics.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "eval/metrics.h"

namespace mopt::eval {

enum class GateMetric { kTop1, kTopk, kKl, kKlP99, kKlMax, kPpl, kPplDelta, kPplRatio };
enum class GateOp { kGe, kLe, kGt, kLt };

const char* gate_metric_name(GateMetric m);  // as written in a gate: "top1", "kl_p99", ...
bool gate_needs_reference(GateMetric m);     // every metric but ppl compares against a reference
double gate_metric_value(const EvalMetrics& m, GateMetric metric);

struct GateCheck {
  std::string text;  // the comparison as written, trimmed
  GateMetric metric = GateMetric::kTop1;
  GateOp op = GateOp::kGe;
  double threshold = 0;
};

// A comma-separated list of METRIC OP NUMBER (OP: >=, <=, >, <; spaces allowed around each part). The error
// says which item is malformed and what is accepted.
Result<std::vector<GateCheck>> parse_gate(std::string_view spec);

struct GateOutcome {
  GateCheck check;
  double value = 0;  // the metric's value
  bool passed = false;
};
// Checks every comparison (a NaN value fails). An error when a check needs a reference the metrics lack.
Result<std::vector<GateOutcome>> apply_gate(const std::vector<GateCheck>& checks, const EvalMetrics& m);

}  // namespace mopt::eval
