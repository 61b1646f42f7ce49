// Presentation of an evaluation: the table `mopt eval` prints and its --json document (every figure).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/evaluate.h"
#include "eval/gate.h"

namespace mopt::eval {

struct ReportLabels {
  std::string model, ref, text, device;  // what was evaluated, on what (ref empty without a reference)
};

std::string format_table(const EvalResult& r, const ReportLabels& labels);
// The gate's lines: "gate: PASS top1>=0.995 (top1 = 0.99912)", one per check.
std::string format_gate(const std::vector<GateOutcome>& outcomes);
// gate: null when no gate was given.
nlohmann::json to_json(const EvalResult& r, const ReportLabels& labels, const std::vector<GateOutcome>* gate);

}  // namespace mopt::eval
