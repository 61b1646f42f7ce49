// The report of `mopt tune`: a table of every trial (text and Markdown), a chart of goodput against tail latency
// with the Pareto front marked (SVG), and a self-contained HTML page with both, the winning TOML and links to
// each trial's evidence.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tune/sla.h"
#include "tune/trial.h"

namespace mopt::tune {

struct TuneReport {
  nlohmann::json study;                // what was tuned (the trial log's first line)
  Sla sla;
  std::vector<TrialResult> trials;     // in the order they ran
  int winner = -1, defaults = -1, confirm = -1;  // indices into trials (-1: none)
  std::string toml;                    // the winning settings file ("" when nothing met the SLA)
  std::string toml_path;
  std::string stop_reason;             // why the search ended
  std::string margin;                  // "goodput 12.3 req/s vs 8.1 with the defaults (+52%)"
  std::string reproduced;              // "confirmation: 12.0 req/s (-2.4%)"
};

// Indices of the points (x to minimize, y to maximize) that no other point beats on both; finite points only.
std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& xy);

std::string report_table(const TuneReport& r);     // fixed-width text
std::string report_markdown(const TuneReport& r);
std::string report_svg(const TuneReport& r);       // goodput vs P99 TTFT, TPOT and E2E, fronts marked
std::string report_html(const TuneReport& r);

}  // namespace mopt::tune
