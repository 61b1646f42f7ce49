// The verdicts of `mopt gate`: each gate turns what the probes measured into a figure, its threshold and pass,
// fail, skip (the gate does not apply here, and says why) or error (it could not be measured). A skip is never a
// pass: the report shows it, and --strict counts it as a failure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gate/probes.h"
#include "gate/thresholds.h"

namespace mopt::gate {

enum class Verdict { kPass, kFail, kSkip, kError };
const char* verdict_name(Verdict v);  // "pass", "FAIL", "skip", "ERROR"

struct GateResult {
  std::string name;         // leak, tail, errors, cuda_graphs, accuracy, resources, restart
  Verdict verdict = Verdict::kError;
  std::string measured;     // the figure, e.g. "RSS +0.02 MB/h (upper 95%: 0.05 MB/h, 120 samples)"
  std::string threshold;    // e.g. "< 0.1 MB/h"
  std::string detail;       // why it failed, was skipped or could not be measured; more facts
  nlohmann::json data = nlohmann::json::object();  // the figures behind it (--json)
};

GateResult error_result(const std::string& name, const std::string& threshold, const std::string& why);

// From a soak: memory growth (linear fits of RSS and, when reported, device memory against time), P99.9
// end-to-end latency, error rate, and CUDA graphs as the server's /metrics reports them.
GateResult leak_gate(const SoakResult& s, const Thresholds& t);
GateResult tail_gate(const SoakResult& s, const Thresholds& t);
GateResult error_gate(const SoakResult& s, const Thresholds& t);
GateResult cuda_graph_gate(const SoakResult& s, bool is_cuda);
GateResult restart_gate(const RestartTimes& r, const Thresholds& t);

}  // namespace mopt::gate
