// `mopt gate`: production readiness of a model + serving settings at a target load, as seven gates (gates.h):
// restart (several starts, each to its first answer), a soak at the target load (leak, tail, errors, CUDA graphs
// from the same run), resource limits (the planned footprint under the memory limit, and a start that must be
// refused), and accuracy against a baseline (mopt eval). Every server is a `mopt serve` child; logs and the
// soak's evidence go to the output directory. See docs/gate.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gate/gates.h"
#include "gate/probes.h"
#include "gate/selection.h"
#include "gate/thresholds.h"
#include "tune/drive.h"

namespace mopt::gate {

struct GateOptions {
  ServerSpec server;                 // binary, serve arguments (model and settings), startup timeout, log_dir
  std::string model;                 // the served model (for the accuracy and resource gates)
  tune::LoadPlan load;               // the target load; load.duration_s is the soak's length
  Thresholds thresholds;
  double sample_interval_s = 1.0;    // memory samples during the soak
  bool is_cuda = false;
  uint64_t memory_limit = 0;         // --memory-limit in bytes (0: the cgroup's limit, if there is one)
  std::string baseline;              // accuracy: the reference model ("" skips the gate)
  std::string eval_text;             // accuracy: the text evaluated
  bool strict = false;               // a skipped gate fails the run
  GateSelection gates;               // the gates measured (--gates); the others are neither run nor reported
  loadgen::ProgressPrinter::Style progress = loadgen::ProgressPrinter::Style::kOff;
};

struct GateRun {
  std::vector<GateResult> gates;     // in the order of the report
  std::vector<MemorySample> samples; // the soak's memory samples (the report's chart)
  nlohmann::json config;             // what was run
  bool strict = false;
  bool passed() const;               // no FAIL or ERROR (and no skip under --strict)
};

// Runs the selected gates; a gate that cannot be measured is an ERROR result, not an error of the run.
GateRun run_gate(const GateOptions& opt);

// The accuracy and resource gates (accuracy.cpp, resources.cpp).
GateResult accuracy_gate(const GateOptions& opt);
// soak: null when the soak did not run.
GateResult resource_gate(const GateOptions& opt, const SoakResult* soak);

}  // namespace mopt::gate
