// Which of `mopt gate`'s seven gates a run measures (`--gates leak,tail,...`; default: all). A gate left out is
// not measured and not reported; the probes it needs run only for the gates that need them: the soak for leak,
// tail, errors, cuda_graphs and resources (its peak RSS and served settings); the timed restarts for restart; the
// two-model evaluation for accuracy. So `--gates accuracy` checks a quantized variant against its baseline without
// a soak.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mopt::gate {

// The gates in the report's order.
inline constexpr std::array<const char*, 7> kGateNames = {"leak",     "tail",      "errors", "cuda_graphs",
                                                          "accuracy", "resources", "restart"};

struct GateSelection {
  std::array<bool, kGateNames.size()> on{true, true, true, true, true, true, true};

  bool has(std::string_view name) const;       // name: one of kGateNames
  bool needs_soak() const;                     // leak, tail, errors, cuda_graphs or resources
  std::vector<std::string> names() const;      // the selected ones, in the report's order
  bool all() const;
};

// "tail,leak" -> those two. Names are comma-separated, spaces around them ignored; an unknown name, an empty
// list or a repeated name is an error that lists the gates.
Result<GateSelection> parse_gate_selection(const std::string& list);

}  // namespace mopt::gate
