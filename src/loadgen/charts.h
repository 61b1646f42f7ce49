// Self-contained SVG charts (written by hand: no plotting library in Debian fits a C++ tool) and the HTML report.
// A chart is a grid of panels; each panel has linear axes with "nice" ticks (1/2/5 x 10^k), grid lines, axis
// labels and a legend.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "loadgen/report.h"

namespace mopt::loadgen {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool markers = false;
  bool dashed = false;
  bool line = true;  // false: markers only (a scatter plot)
};

struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  double ymin = NAN, ymax = NAN;  // NAN: from the data (with 0 included for ymin)
  enum class Legend { kTopLeft, kBottomRight };
  Legend legend = Legend::kTopLeft;
};

// "Nice" tick values covering [lo, hi] with about `target` intervals.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

std::string render_svg(const std::string& title, const std::vector<Panel>& panels, int cols, int panel_w = 520,
                       int panel_h = 340);

// Latency CDFs (TTFT, TPOT, ITL, E2E), one curve per run.
std::string cdf_chart(const std::vector<RunResult>& runs);
// Throughput and latency against the swept load (needs >= 2 runs of one mode).
std::string sweep_chart(const std::vector<RunResult>& runs, const SloSpec& slo);
// Text for HTML and SVG: & < > " escaped.
std::string html_escape(const std::string& s);
// The start of a self-contained HTML page (doctype, title, the reports' style sheet, <body>, an <h1> title);
// the caller appends the content and "</body></html>".
std::string html_page_start(const std::string& title);

// A self-contained HTML page with the summary tables and both charts.
std::string html_report(const nlohmann::json& config, const std::vector<RunResult>& runs, const SloSpec& slo);

}  // namespace mopt::loadgen
