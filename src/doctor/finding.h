// One doctor check's outcome: a verdict, the evidence it rests on, and the fix in a sentence or two.
#pragma once

#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace mopt::doctor {

// kSkip: not applicable here (no GPU, nothing to read); it does not change the exit code.
enum class Verdict { kOk, kWarn, kFail, kSkip };
const char* verdict_name(Verdict v);  // "ok", "warn", "fail", "skip"

struct Finding {
  std::string id;     // stable key, e.g. "driver.cuda_version", "gpu0.ecc"
  std::string group;  // "Driver and CUDA", "GPU health", "Topology", "Containers and devices", "CPU", "Model"
  std::string title;  // "CUDA driver vs runtime"
  Verdict verdict = Verdict::kOk;
  std::string evidence;  // what was read, with the figures
  std::string fix;       // empty when ok
};

struct Report {
  std::vector<Finding> findings;
  nlohmann::ordered_json facts;  // everything read, for --json (field names in docs/doctor.md)

  // 0 all ok (or skipped), 1 a warning, 2 a failure.
  int exit_code() const;
  const Finding* find(const std::string& id) const;
};

// Appends a finding (helper for the checks).
Finding& add(std::vector<Finding>& out, std::string id, std::string group, std::string title, Verdict v,
             std::string evidence, std::string fix = "");

// A byte count in GiB with one decimal, as evidence prints it: "79.6 GiB".
std::string gib(uint64_t bytes);

// Appends `item` to a `sep`-separated list.
void join_to(std::string& list, const std::string& item, const char* sep = ", ");

}  // namespace mopt::doctor
