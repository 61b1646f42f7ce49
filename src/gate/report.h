// The report of `mopt gate`: one row per gate (figure, threshold, verdict) as a text table, JSON, Markdown, or a
// self-contained HTML page with the soak's memory chart.
#pragma once

#include <string>

#include "gate/gate.h"

namespace mopt::gate {

std::string report_table(const GateRun& r);
std::string report_json(const GateRun& r);  // {"passed", "gates": [...], "config"}
std::string report_markdown(const GateRun& r);
std::string report_html(const GateRun& r);

}  // namespace mopt::gate
