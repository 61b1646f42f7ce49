#include "tune/report.h"

#include <algorithm>
#include <cmath>

#include "core/strfmt.h"
#include "loadgen/charts.h"

namespace mopt::tune {

using loadgen::html_escape;

std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& xy) {
  std::vector<size_t> front;
  for (size_t i = 0; i < xy.size(); ++i) {
    const auto [xi, yi] = xy[i];
    if (!std::isfinite(xi) || !std::isfinite(yi)) continue;
    bool dominated = false;
    for (size_t j = 0; j < xy.size() && !dominated; ++j) {
      const auto [xj, yj] = xy[j];
      if (j == i || !std::isfinite(xj) || !std::isfinite(yj)) continue;
      dominated = xj <= xi && yj >= yi && (xj < xi || yj > yi);
    }
    if (!dominated) front.push_back(i);
  }
  return front;
}

namespace {

// The trials of the chart (complete measurements) and which of them are on the goodput / P99 E2E front.
std::vector<bool> on_front(const TuneReport& r) {
  std::vector<std::pair<double, double>> xy;
  for (const auto& t : r.trials)
    xy.emplace_back(t.status == "ok" ? t.e2e_p99 : NAN, t.status == "ok" ? t.goodput : NAN);
  std::vector<bool> f(r.trials.size(), false);
  for (size_t i : pareto_front(xy)) f[i] = true;
  return f;
}

std::string ms(double s) { return std::isfinite(s) ? strfmt("%.1f", s * 1e3) : std::string("-"); }

// Short names of the knobs in the table (the legend is printed under it).
const std::pair<const char*, const char*> kShort[] = {
    {"model", "model"},    {"max-num-seqs", "seqs"}, {"max-num-batched-tokens", "mbt"}, {"block-size", "bs"},
    {"kv-cache-dtype", "kv"}, {"prefix-caching", "pc"}, {"cuda-graphs", "graphs"},       {"kv-cache-memory", "kvmem"}};

// The searched knobs of a trial ("seqs=8 mbt=2048 bs=64"); the others are the same in every trial.
std::string settings_text(const TrialResult& t, const nlohmann::json& study) {
  if (t.role == "defaults") return "serve's defaults";
  std::string out;
  for (const auto& [name, brief] : kShort) {
    if (!study.contains("space") || !study["space"].contains(name) || !t.settings.contains(name)) continue;
    std::string v = t.settings[name].is_string() ? t.settings[name].get<std::string>() : t.settings[name].dump();
    if (std::string(name) == "model") v = v.substr(v.find_last_of('/') + 1);
    out += (out.empty() ? "" : " ") + std::string(brief) + "=" + v;
  }
  return out.empty() ? "-" : out;
}

std::string sla_text(const TrialResult& t) {
  if (t.status != "ok") return "-";
  return t.feasible ? "met" : "missed";
}

struct Row {
  std::vector<std::string> cells;
};

std::vector<Row> rows(const TuneReport& r) {
  const std::vector<bool> front = on_front(r);
  std::vector<Row> out;
  for (size_t i = 0; i < r.trials.size(); ++i) {
    const TrialResult& t = r.trials[i];
    std::string mark = static_cast<int>(i) == r.winner ? "winner" : "";
    if (front[i]) mark += mark.empty() ? "front" : ", front";
    out.push_back({{std::to_string(t.index), t.role, settings_text(t, r.study), t.status,
                    t.measured() ? strfmt("%.2f", t.goodput) : "-",
                    t.measured() ? strfmt("%.2f", t.request_throughput) : "-", ms(t.ttft_p99), ms(t.tpot_p99),
                    ms(t.e2e_p99), t.measured() ? strfmt("%.3g", t.error_rate) : "-", sla_text(t), mark}});
  }
  return out;
}

const std::vector<std::string> kHeader = {"#",        "role",     "settings",     "status", "goodput/s", "req/s",
                                          "TTFT p99", "TPOT p99", "E2E p99 (ms)", "errors", "SLA",       "note"};

}  // namespace

std::string report_table(const TuneReport& r) {
  const auto rs = rows(r);
  std::vector<size_t> w(kHeader.size());
  for (size_t c = 0; c < kHeader.size(); ++c) {
    w[c] = kHeader[c].size();
    for (const auto& row : rs) w[c] = std::max(w[c], row.cells[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool left = c == 1 || c == 2 || c == 3 || c == 11;
      s += strfmt(left ? "%-*s" : "%*s", static_cast<int>(w[c]), cells[c].c_str());
      s += c + 1 < cells.size() ? "  " : "";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(kHeader);
  for (const auto& row : rs) out += line(row.cells);
  out += "settings: seqs = max-num-seqs, mbt = max-num-batched-tokens, bs = block-size, kv = kv-cache-dtype, "
         "pc = prefix-caching, kvmem = kv-cache-memory; goodput and req/s per second, latencies in ms\n";
  for (const auto& t : r.trials)
    if (!t.detail.empty()) {
      std::string d = t.detail.substr(0, t.detail.find('\n'));
      out += strfmt("  trial %d (%s): %s\n", t.index, t.status.c_str(), d.c_str());
    }
  return out;
}

std::string report_markdown(const TuneReport& r) {
  std::string out = "| " + [&] {
    std::string h;
    for (size_t c = 0; c < kHeader.size(); ++c) h += kHeader[c] + (c + 1 < kHeader.size() ? " | " : "");
    return h;
  }() + " |\n|";
  for (size_t c = 0; c < kHeader.size(); ++c) out += c == 2 ? "---|" : "--:|";
  out += "\n";
  for (const auto& row : rows(r)) {
    out += "|";
    for (const auto& cell : row.cells) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

std::string report_svg(const TuneReport& r) {
  const std::vector<bool> front = on_front(r);
  struct Axis {
    const char* title;
    const char* xlabel;
    const char* metric;  // SLA metric name prefix
    double TrialResult::*field;
  };
  const Axis axes[] = {{"goodput vs P99 TTFT", "P99 TTFT (ms)", "ttft", &TrialResult::ttft_p99},
                       {"goodput vs P99 TPOT", "P99 TPOT (ms)", "tpot", &TrialResult::tpot_p99},
                       {"goodput vs P99 E2E latency", "P99 E2E (ms)", "e2e", &TrialResult::e2e_p99}};
  std::vector<loadgen::Panel> panels;
  double ymax = 0;
  for (const auto& t : r.trials)
    if (t.status == "ok" && std::isfinite(t.goodput)) ymax = std::max(ymax, t.goodput);
  for (const Axis& a : axes) {
    loadgen::Panel p;
    p.title = a.title;
    p.xlabel = a.xlabel;
    p.ylabel = "goodput (requests/s)";
    loadgen::Series met{"SLA met", {}, true, false, false}, missed{"SLA missed", {}, true, false, false},
        fr{"Pareto front (goodput vs P99 E2E)", {}, true, false, true}, def{"serve's defaults", {}, true, false, false},
        win{"winner", {}, true, false, false}, lim{"SLA limit", {}, false, true, true};
    std::vector<std::pair<double, double>> front_pts;
    for (size_t i = 0; i < r.trials.size(); ++i) {
      const TrialResult& t = r.trials[i];
      if (t.status != "ok") continue;
      const std::pair<double, double> pt{t.*a.field * 1e3, t.goodput};
      (t.feasible ? met : missed).points.push_back(pt);
      if (front[i]) front_pts.push_back(pt);
      if (static_cast<int>(i) == r.defaults) def.points.push_back(pt);
      if (static_cast<int>(i) == r.winner) win.points.push_back(pt);
    }
    std::sort(front_pts.begin(), front_pts.end());
    fr.points = front_pts;
    for (const auto& b : r.sla.bounds())
      if (b.name.rfind(a.metric, 0) == 0 && b.percentile == 99)
        lim.points = {{b.limit * 1e3, 0}, {b.limit * 1e3, ymax > 0 ? ymax * 1.05 : 1}};
    p.series = {met, missed, fr, def, win};
    if (!lim.points.empty()) p.series.push_back(lim);
    panels.push_back(std::move(p));
  }
  return loadgen::render_svg("mopt tune: goodput against tail latency, every trial", panels, 3, 460, 360);
}

std::string report_html(const TuneReport& r) {
  std::string h = loadgen::html_page_start("mopt tune report");
  h += "<p><b>SLA</b>: " + html_escape(r.sla.to_string()) + "<br><b>Result</b>: " +
       html_escape(r.margin.empty() ? "no trial met the SLA" : r.margin) + "<br>";
  if (!r.reproduced.empty()) h += "<b>Re-run of the winner</b>: " + html_escape(r.reproduced) + "<br>";
  h += "<b>Search</b>: " + html_escape(r.stop_reason) + "</p>\n";
  h += "<h2>Goodput against latency</h2>\n" + report_svg(r) +
       "<p>Each point is a trial that ran to the end; the front joins the trials no other trial beats on both goodput "
       "and P99 end-to-end latency.</p>\n";
  h += "<h2>Trials</h2>\n<table><tr>";
  for (const auto& c : kHeader) h += "<th>" + html_escape(c) + "</th>";
  h += "</tr>\n";
  const auto rs = rows(r);
  for (size_t i = 0; i < rs.size(); ++i) {
    h += "<tr>";
    for (size_t c = 0; c < rs[i].cells.size(); ++c) {
      std::string cell = html_escape(rs[i].cells[c]);
      if (c == 3) {  // the status links to the evidence
        const TrialResult& t = r.trials[i];
        const std::string& ev = !t.evidence.empty() ? t.evidence : t.server_log;
        const std::string rel = ev.substr(ev.rfind("/trials/") == std::string::npos ? 0 : ev.rfind("/trials/") + 1);
        if (!rel.empty()) cell = "<a href=\"" + html_escape(rel) + "\">" + cell + "</a>";
        if (!t.detail.empty()) cell = "<span title=\"" + html_escape(t.detail) + "\">" + cell + "</span>";
      }
      h += (c == 2 ? "<td style=\"text-align:left\">" : "<td>") + cell + "</td>";
    }
    h += "</tr>\n";
  }
  h += "</table>\n<p>Latencies in milliseconds (P99 over the trial's successful requests). Goodput: requests per "
       "second that met the SLA's latency limits one by one. Each status links to the trial's evidence (every "
       "request, the server's /metrics deltas); the server logs are beside it.</p>\n";
  if (!r.toml.empty())
    h += "<h2>Winning settings (" + html_escape(r.toml_path) + ")</h2>\n<pre>" + html_escape(r.toml) +
         "</pre>\n<p>Serve them with <code>mopt serve --config " + html_escape(r.toml_path) + "</code>.</p>\n";
  h += "<h2>Study</h2>\n<pre>" + html_escape(r.study.dump(2)) + "</pre>\n</body></html>\n";
  return h;
}

}  // namespace mopt::tune
