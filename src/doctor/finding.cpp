#include "doctor/finding.h"

#include "core/enum_name.h"
#include "core/strfmt.h"

namespace mopt::doctor {

const char* verdict_name(Verdict v) {
  static constexpr EnumName<Verdict> kNames[] = {
      {Verdict::kOk, "ok"}, {Verdict::kWarn, "warn"}, {Verdict::kFail, "fail"}, {Verdict::kSkip, "skip"}};
  return name_of(v, kNames);
}

int Report::exit_code() const {
  int code = 0;
  for (const Finding& f : findings) {
    if (f.verdict == Verdict::kFail) return 2;
    if (f.verdict == Verdict::kWarn) code = 1;
  }
  return code;
}

const Finding* Report::find(const std::string& id) const {
  for (const Finding& f : findings)
    if (f.id == id) return &f;
  return nullptr;
}

Finding& add(std::vector<Finding>& out, std::string id, std::string group, std::string title, Verdict v,
             std::string evidence, std::string fix) {
  out.push_back({std::move(id), std::move(group), std::move(title), v, std::move(evidence), std::move(fix)});
  return out.back();
}

std::string gib(uint64_t bytes) { return strfmt("%.1f GiB", static_cast<double>(bytes) / 1073741824.0); }

void join_to(std::string& list, const std::string& item, const char* sep) {
  if (!list.empty()) list += sep;
  list += item;
}

}  // namespace mopt::doctor
