// mopt doctor: checks the machine (driver, CUDA, GPUs, topology, container limits, CPU, and optionally a model) and
// reports each finding with a verdict, its evidence and a fix. Runs anywhere: NVML and the CUDA driver are loaded
// at run time; without them it says so and checks the CPU path.
#pragma once

#include <cstdio>
#include <string>

#include "doctor/build_info.h"
#include "doctor/finding.h"

namespace mopt::doctor {

struct DoctorOptions {
  std::string model;      // -m: also check this model's files (empty: no model checks)
  bool read_test = true;  // measure the model's filesystem read speed
  BuildInfo build = BuildInfo::current();
};

Report run_doctor(const DoctorOptions& opts);

// The report as text (grouped, one line per finding plus its fix) or as JSON ({"checks": [...], "facts": {...},
// "summary": {...}, "exit_code": N}).
void print_report_text(const Report& r, std::FILE* out);
std::string report_json(const Report& r);

}  // namespace mopt::doctor
