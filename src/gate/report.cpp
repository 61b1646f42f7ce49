#include "gate/report.h"

#include <algorithm>

#include "core/strfmt.h"
#include "gate/fit.h"
#include "loadgen/charts.h"

namespace mopt::gate {

using json = nlohmann::json;
using loadgen::html_escape;

namespace {

std::string overall(const GateRun& r) {
  // A run of some gates only (--gates) says which ran: its verdict covers those alone.
  std::string only;
  if (r.gates.size() < kGateNames.size()) {
    for (const auto& g : r.gates) only += (only.empty() ? "" : ", ") + g.name;
    only = strfmt(" (%zu of %zu gates run, --gates: %s)", r.gates.size(), kGateNames.size(), only.c_str());
  }
  return (r.passed() ? "PASSED: every gate passed" + std::string(r.strict ? "" : " or does not apply here (skip)")
                     : "FAILED: at least one gate failed or could not be measured" +
                           std::string(r.strict ? " (--strict: a skip fails too)" : "")) +
         only;
}

// Anonymous RSS (and device memory) over the soak, with the leak gate's fitted line.
std::string memory_chart(const GateRun& r) {
  if (r.samples.size() < 2) return "";
  loadgen::Series rss{"host anonymous RSS (MB)", {}, true, false, true}, fit{"fitted line", {}, false, true, true},
      dev{"GPU memory in use (MB)", {}, true, false, true};
  std::vector<double> t, y;
  for (const auto& m : r.samples) {
    rss.points.emplace_back(m.t_s, m.anon_bytes / 1e6);
    t.push_back(m.t_s);
    y.push_back(m.anon_bytes / 1e6);
    if (std::isfinite(m.device_bytes)) dev.points.emplace_back(m.t_s, m.device_bytes / 1e6);
  }
  const LineFit f = fit_line(t, y);
  fit.points = {{t.front(), f.intercept + f.slope * t.front()}, {t.back(), f.intercept + f.slope * t.back()}};
  loadgen::Panel p;
  p.title = "memory during the soak";
  p.xlabel = "seconds since the end of the warm-up";
  p.ylabel = "MB";
  p.series = {rss, fit};
  if (!dev.points.empty()) p.series.push_back(dev);
  const double lo = *std::min_element(y.begin(), y.end()), hi = *std::max_element(y.begin(), y.end());
  p.ymin = std::max(0.0, lo - std::max(1.0, 0.1 * (hi - lo)));
  return loadgen::render_svg("mopt gate: leak", {p}, 1, 760, 360);
}

}  // namespace

std::string report_table(const GateRun& r) {
  size_t wn = 4, wv = 7, wm = 8;
  for (const auto& g : r.gates) {
    wn = std::max(wn, g.name.size());
    wm = std::max(wm, std::min<size_t>(g.measured.size(), 90));
  }
  std::string out = strfmt("%-*s  %-*s  %-*s  %s\n", static_cast<int>(wn), "gate", static_cast<int>(wv), "verdict",
                           static_cast<int>(wm), "measured", "threshold");
  for (const auto& g : r.gates)
    out += strfmt("%-*s  %-*s  %-*s  %s\n", static_cast<int>(wn), g.name.c_str(), static_cast<int>(wv),
                  verdict_name(g.verdict), static_cast<int>(wm), g.measured.c_str(), g.threshold.c_str());
  for (const auto& g : r.gates)
    if (!g.detail.empty()) out += "  " + g.name + ": " + g.detail + "\n";
  return out + overall(r) + "\n";
}

std::string report_json(const GateRun& r) {
  json gates = json::array();
  for (const auto& g : r.gates)
    gates.push_back({{"name", g.name}, {"verdict", g.verdict == Verdict::kPass   ? "pass"
                                                   : g.verdict == Verdict::kFail ? "fail"
                                                   : g.verdict == Verdict::kSkip ? "skip"
                                                                                 : "error"},
                     {"measured", g.measured}, {"threshold", g.threshold}, {"detail", g.detail}, {"data", g.data}});
  return json{{"tool", "mopt gate"}, {"passed", r.passed()}, {"gates", gates}, {"config", r.config}}.dump(2) + "\n";
}

std::string report_markdown(const GateRun& r) {
  std::string out = "# mopt gate\n\n**" + overall(r) + "**\n\n| gate | verdict | measured | threshold |\n|---|---|---|---|\n";
  for (const auto& g : r.gates)
    out += "| " + g.name + " | " + verdict_name(g.verdict) + " | " + g.measured + " | " + g.threshold + " |\n";
  out += "\n";
  for (const auto& g : r.gates)
    if (!g.detail.empty()) out += "- **" + g.name + "**: " + g.detail + "\n";
  return out;
}

std::string report_html(const GateRun& r) {
  std::string h = loadgen::html_page_start("mopt gate report");
  h += "<p><b>" + html_escape(overall(r)) + "</b></p>\n<table><tr><th>gate</th><th>verdict</th><th>measured</th>"
       "<th>threshold</th><th>detail</th></tr>\n";
  for (const auto& g : r.gates) {
    const char* color = g.verdict == Verdict::kPass ? "#2ca02c" : g.verdict == Verdict::kSkip ? "#7f7f7f" : "#d62728";
    h += "<tr><td>" + html_escape(g.name) + "</td><td style=\"color:" + color + ";font-weight:bold\">" +
         verdict_name(g.verdict) + "</td><td style=\"text-align:left\">" + html_escape(g.measured) +
         "</td><td style=\"text-align:left\">" + html_escape(g.threshold) + "</td><td style=\"text-align:left\">" +
         html_escape(g.detail) + "</td></tr>\n";
  }
  h += "</table>\n";
  if (const std::string c = memory_chart(r); !c.empty()) h += "<h2>Memory during the soak</h2>\n" + c;
  h += "<h2>Configuration</h2>\n<pre>" + html_escape(r.config.dump(2)) + "</pre>\n</body></html>\n";
  return h;
}

}  // namespace mopt::gate
