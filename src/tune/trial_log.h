// The trial log of `mopt tune` (<out>/trials.jsonl): one JSON object per line, the study first (what is tuned:
// models, workload, SLA, device, search space), then one line per finished trial, flushed as it ends. It is the
// evidence of the run and what `--resume` continues from: a resumed run must describe the same study, and the
// search replays the logged trials instead of running them again.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "tune/trial.h"

namespace mopt::tune {

class TrialLog {
 public:
  // resume = false: starts a new log; an existing log with trials is an error (nothing is overwritten).
  // resume = true: reads the trials of an existing log of the same study (a missing log starts a new one). A
  // torn last line (the run was killed while writing it) is dropped with a note in `notes`.
  static Result<TrialLog> open(const std::string& path, const nlohmann::json& study, bool resume);
  TrialLog(TrialLog&& o) noexcept;
  TrialLog& operator=(TrialLog&&) = delete;
  ~TrialLog();

  const std::vector<TrialResult>& previous() const { return previous_; }
  const std::vector<std::string>& notes() const { return notes_; }
  Status append(const TrialResult& t);

 private:
  TrialLog() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<TrialResult> previous_;
  std::vector<std::string> notes_;
};

}  // namespace mopt::tune
