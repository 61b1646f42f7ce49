#include "tune/trial_log.h"

#include <fstream>

#include "core/strfmt.h"

namespace mopt::tune {

using json = nlohmann::json;

namespace {

// The top-level keys whose values differ (for the message when a resumed study does not match).
std::string differing_keys(const json& a, const json& b) {
  std::string out;
  for (auto it = a.begin(); it != a.end(); ++it)
    if (!b.contains(it.key()) || b.at(it.key()) != it.value()) out += (out.empty() ? "" : ", ") + it.key();
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!a.contains(it.key())) out += (out.empty() ? "" : ", ") + it.key();
  return out;
}

}  // namespace

TrialLog::TrialLog(TrialLog&& o) noexcept
    : path_(std::move(o.path_)), f_(o.f_), previous_(std::move(o.previous_)), notes_(std::move(o.notes_)) {
  o.f_ = nullptr;
}

TrialLog::~TrialLog() {
  if (f_) std::fclose(f_);
}

Result<TrialLog> TrialLog::open(const std::string& path, const json& study, bool resume) {
  TrialLog log;
  log.path_ = path;
  std::vector<std::string> lines;
  {
    std::ifstream in(path);
    std::string line;
    while (in && std::getline(in, line))
      if (!line.empty()) lines.push_back(line);
  }
  const bool has_trials = lines.size() > 1;
  if (!resume && has_trials)
    return error("%s holds %zu trials of an earlier run: pass --resume to continue it, or choose another "
                 "--output-dir", path.c_str(), lines.size() - 1);
  if (resume && !lines.empty()) {
    json head = json::parse(lines[0], nullptr, false);
    if (head.is_discarded() || !head.is_object() || head.value("type", "") != "study" || !head.contains("study"))
      return error("%s does not start with a study line: it is not a trial log of mopt tune", path.c_str());
    if (head["study"] != study)
      return error("%s was written for another study (it differs in: %s); resume with the same models, workload, "
                   "SLA and search space, or choose another --output-dir",
                   path.c_str(), differing_keys(head["study"], study).c_str());
    for (size_t i = 1; i < lines.size(); ++i) {
      json j = json::parse(lines[i], nullptr, false);
      Result<TrialResult> t = j.is_discarded() ? Result<TrialResult>(error("not JSON")) : TrialResult::from_json(j);
      if (!t) {
        if (i + 1 == lines.size()) {
          log.notes_.push_back(strfmt("%s: the last line is torn (the run was stopped while writing it); that trial "
                                      "runs again", path.c_str()));
          lines.pop_back();
          break;
        }
        return error("%s line %zu: %s", path.c_str(), i + 1, t.message().c_str());
      }
      log.previous_.push_back(std::move(*t));
    }
  }
  // Rewrite the log from what was read (drops a torn line) into a new file that replaces it at once, then append.
  std::string out = json{{"type", "study"}, {"study", study}}.dump() + "\n";
  for (size_t i = 1; i < lines.size() && resume; ++i) out += lines[i] + "\n";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << out;
    f.close();
    if (!f) return error("cannot write the trial log '%s' (does --output-dir exist and is it writable?)", tmp.c_str());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return error("cannot replace the trial log '%s'", path.c_str());
  log.f_ = std::fopen(path.c_str(), "a");
  if (!log.f_) return error("cannot append to the trial log '%s'", path.c_str());
  return log;
}

Status TrialLog::append(const TrialResult& t) {
  json j = t.to_json();
  j["type"] = "trial";
  const std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (std::fputs(line.c_str(), f_) < 0 || std::fflush(f_) != 0)
    return error("cannot append to the trial log '%s' (disk full?)", path_.c_str());
  return Status::ok();
}

}  // namespace mopt::tune
