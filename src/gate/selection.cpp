#include "gate/selection.h"

#include <algorithm>

#include "core/strings.h"

namespace mopt::gate {

namespace {

int index_of(std::string_view name) {
  for (size_t i = 0; i < kGateNames.size(); ++i)
    if (name == kGateNames[i]) return static_cast<int>(i);
  return -1;
}

std::string all_names() {
  std::string s;
  for (const char* n : kGateNames) s += std::string(s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

bool GateSelection::has(std::string_view name) const {
  const int i = index_of(name);
  return i >= 0 && on[static_cast<size_t>(i)];
}

bool GateSelection::needs_soak() const {
  return has("leak") || has("tail") || has("errors") || has("cuda_graphs") || has("resources");
}

std::vector<std::string> GateSelection::names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < kGateNames.size(); ++i)
    if (on[i]) out.emplace_back(kGateNames[i]);
  return out;
}

bool GateSelection::all() const { return std::all_of(on.begin(), on.end(), [](bool b) { return b; }); }

Result<GateSelection> parse_gate_selection(const std::string& list) {
  GateSelection s;
  s.on.fill(false);
  if (trim_blanks(list).empty()) return error("--gates is empty: name at least one of %s", all_names().c_str());
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string name(trim_blanks(std::string_view(list).substr(begin, end - begin)));
    begin = end + 1;
    if (name.empty()) return error("--gates '%s': an empty name (the gates: %s)", list.c_str(), all_names().c_str());
    const int i = index_of(name);
    if (i < 0) return error("--gates: unknown gate '%s' (the gates: %s)", name.c_str(), all_names().c_str());
    if (s.on[static_cast<size_t>(i)]) return error("--gates: '%s' is named twice", name.c_str());
    s.on[static_cast<size_t>(i)] = true;
  }
  return s;
}

}  // namespace mopt::gate
