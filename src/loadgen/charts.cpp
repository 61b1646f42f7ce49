#include "loadgen/charts.h"

#include <algorithm>
#include <limits>

namespace mopt::loadgen {

namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string fmt_tick(double v, double step) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return strfmt("%.3g", v);
  const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return strfmt("%.*f", decimals, v);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string html_page_start(const std::string& title) {
  return "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + html_escape(title) +
         "</title>\n"
         "<style>body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;max-width:1100px}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "th{background:#f3f3f3}td:first-child{text-align:left}pre{background:#f8f8f8;padding:8px;font-size:12px;"
         "overflow-x:auto}</style></head><body>\n<h1>" +
         html_escape(title) + "</h1>\n";
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  const double k0 = std::floor(lo / step + 1e-9);
  for (double k = k0; t.size() < 50; k += 1) {
    const double v = k * step;
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    if (v >= hi - step * 1e-9) break;
  }
  const double first = k0 * step;
  if (t.size() < 2) t.push_back(first + step);
  return t;
}

std::string render_svg(const std::string& title, const std::vector<Panel>& panels, int cols, int pw, int ph) {
  cols = std::max(1, std::min<int>(cols, static_cast<int>(panels.size())));
  const int rows = (static_cast<int>(panels.size()) + cols - 1) / cols;
  const int title_h = 40;
  const int W = cols * pw, H = title_h + rows * ph;
  std::string s = strfmt(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"26\" font-size=\"18\" font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
      W, H, W, H, W / 2, html_escape(title).c_str());
  const int ml = 72, mr = 20, mt = 34, mb = 52;  // margins inside a panel
  for (size_t pi = 0; pi < panels.size(); ++pi) {
    const Panel& p = panels[pi];
    const int ox = static_cast<int>(pi % static_cast<size_t>(cols)) * pw;
    const int oy = title_h + static_cast<int>(pi / static_cast<size_t>(cols)) * ph;
    const int x0 = ox + ml, x1 = ox + pw - mr, y0 = oy + mt, y1 = oy + ph - mb;  // plot box
    double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
    for (const auto& se : p.series)
      for (auto [x, y] : se.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        xlo = std::min(xlo, x);
        xhi = std::max(xhi, x);
        ylo = std::min(ylo, y);
        yhi = std::max(yhi, y);
      }
    if (!std::isfinite(xlo)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
    ylo = std::isnan(p.ymin) ? std::min(0.0, ylo) : p.ymin;
    if (!std::isnan(p.ymax)) yhi = p.ymax;
    if (xlo > 0 && xlo < 0.25 * xhi) xlo = 0;
    const auto xt = nice_ticks(xlo, xhi), yt = nice_ticks(ylo, yhi);
    xlo = xt.front();
    xhi = std::max(xhi, xt.back());
    xhi = xt.back();
    ylo = yt.front();
    yhi = yt.back();
    auto X = [&](double x) { return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0); };
    auto Y = [&](double y) { return y1 - (y - ylo) / (yhi - ylo) * (y1 - y0); };
    s += strfmt("<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
                (x0 + x1) / 2, oy + 22, html_escape(p.title).c_str());
    // Grid and ticks.
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
    for (double v : xt) {
      const double px = X(v);
      s += strfmt("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e5e5e5\"/>\n", px, y0, px, y1);
      s += strfmt("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", px, y1, px, y1 + 5);
      s += strfmt("<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", px, y1 + 18,
                  fmt_tick(v, xstep).c_str());
    }
    for (double v : yt) {
      const double py = Y(v);
      s += strfmt("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", x0, py, x1, py);
      s += strfmt("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n", x0 - 5, py, x0, py);
      s += strfmt("<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n", x0 - 8, py + 4,
                  fmt_tick(v, ystep).c_str());
    }
    s += strfmt("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", x0, y0, x1 - x0,
                y1 - y0);
    s += strfmt("<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n", (x0 + x1) / 2, y1 + 38,
                html_escape(p.xlabel).c_str());
    s += strfmt("<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %d %d)\">%s</text>\n",
                ox + 18, (y0 + y1) / 2, ox + 18, (y0 + y1) / 2, html_escape(p.ylabel).c_str());
    // Series.
    for (size_t si = 0; si < p.series.size(); ++si) {
      const Series& se = p.series[si];
      const char* color = kColors[si % std::size(kColors)];
      std::string pts;
      for (auto [x, y] : se.points)
        if (std::isfinite(x) && std::isfinite(y)) pts += strfmt("%.1f,%.1f ", X(x), Y(std::clamp(y, ylo, yhi)));
      if (pts.empty()) continue;
      if (se.line)
        s += strfmt("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"%s\"/>\n", color,
                    se.dashed ? " stroke-dasharray=\"6,4\"" : "", pts.c_str());
      if (se.markers)
        for (auto [x, y] : se.points)
          if (std::isfinite(x) && std::isfinite(y))
            s += strfmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", X(x), Y(std::clamp(y, ylo, yhi)),
                        color);
    }
    // Legend.
    if (!p.series.empty()) {
      size_t longest = 0;
      for (const auto& se : p.series) longest = std::max(longest, se.name.size());
      const int lw = 34 + static_cast<int>(longest) * 7, lh = 8 + 16 * static_cast<int>(p.series.size());
      // Corner that covers the fewest data points (sampled along the lines), preferring p.legend on ties.
      const int corners[4][2] = {{x0 + 8, y0 + 8}, {x1 - 8 - lw, y0 + 8}, {x1 - 8 - lw, y1 - 8 - lh}, {x0 + 8, y1 - 8 - lh}};
      int best = p.legend == Panel::Legend::kTopLeft ? 0 : 2;
      auto covered = [&](int c) {
        int n = 0;
        for (const auto& se : p.series)
          for (size_t k = 0; k < se.points.size(); ++k) {
            const auto [xa, ya] = se.points[k];
            const auto [xb, yb] = k + 1 < se.points.size() ? se.points[k + 1] : se.points[k];
            for (int f = 0; f < 8; ++f) {
              const double px = X(xa + (xb - xa) * f / 8.0), py = Y(std::clamp(ya + (yb - ya) * f / 8.0, ylo, yhi));
              n += px >= corners[c][0] - 4 && px <= corners[c][0] + lw + 4 && py >= corners[c][1] - 4 &&
                   py <= corners[c][1] + lh + 4;
            }
          }
        return n;
      };
      int best_n = covered(best);
      for (int c = 0; c < 4; ++c)
        if (const int n = covered(c); n < best_n) best = c, best_n = n;
      const int lx = corners[best][0], ly = corners[best][1];
      s += strfmt("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" "
                  "stroke=\"#bbb\"/>\n", lx, ly, lw, lh);
      for (size_t si = 0; si < p.series.size(); ++si) {
        const int yy = ly + 14 + 16 * static_cast<int>(si);
        if (p.series[si].line)
          s += strfmt("<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                      lx + 6, yy - 4, lx + 26, yy - 4, kColors[si % std::size(kColors)],
                      p.series[si].dashed ? " stroke-dasharray=\"6,4\"" : "");
        else
          s += strfmt("<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"%s\"/>\n", lx + 16, yy - 4,
                      kColors[si % std::size(kColors)]);
        s += strfmt("<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", lx + 30, yy,
                    html_escape(p.series[si].name).c_str());
      }
    }
    s += "</g>\n";
  }
  s += "</svg>\n";
  return s;
}

namespace {

// Empirical CDF of `v` in ms, at most ~300 points.
Series cdf_series(const std::string& name, std::vector<double> v) {
  Series s;
  s.name = name;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const size_t step = std::max<size_t>(1, n / 300);
  s.points.push_back({v[0] * 1e3, 0});
  for (size_t i = 0; i < n; i += step) s.points.push_back({v[i] * 1e3, static_cast<double>(i + 1) / n});
  s.points.push_back({v[n - 1] * 1e3, 1});
  return s;
}

}  // namespace

std::string cdf_chart(const std::vector<RunResult>& runs) {
  std::vector<Panel> panels(4);
  const char* titles[] = {"Time to first token", "Time per output token", "Inter-token latency", "End-to-end latency"};
  for (int i = 0; i < 4; ++i) {
    panels[static_cast<size_t>(i)].title = titles[i];
    panels[static_cast<size_t>(i)].xlabel = "milliseconds";
    panels[static_cast<size_t>(i)].ylabel = "fraction of requests";
    panels[static_cast<size_t>(i)].ymin = 0;
    panels[static_cast<size_t>(i)].ymax = 1;
    panels[static_cast<size_t>(i)].legend = Panel::Legend::kBottomRight;
  }
  panels[2].ylabel = "fraction of gaps";
  for (const auto& r : runs) {
    std::vector<double> ttft, tpot, itl, e2e;
    for (const auto& q : r.phase.records) {
      if (!q.ok()) continue;
      if (q.ttft_s >= 0) ttft.push_back(q.ttft_s);
      if (q.tpot_s() >= 0) tpot.push_back(q.tpot_s());
      itl.insert(itl.end(), q.itl_s.begin(), q.itl_s.end());
      e2e.push_back(q.e2e_s);
    }
    panels[0].series.push_back(cdf_series(r.summary.label, ttft));
    panels[1].series.push_back(cdf_series(r.summary.label, tpot));
    panels[2].series.push_back(cdf_series(r.summary.label, itl));
    panels[3].series.push_back(cdf_series(r.summary.label, e2e));
  }
  return render_svg("mopt bench: latency distributions (CDF)", panels, 2);
}

std::string sweep_chart(const std::vector<RunResult>& runs, const SloSpec& slo) {
  const bool rate = !runs.empty() && runs[0].spec.mode == LoadSpec::Mode::kRate;
  const std::string xl = rate ? "offered load (requests/s)" : "concurrency (requests in flight)";
  Panel thr{"Request throughput", xl, "requests/s", {}};
  Panel tok{"Output token throughput", xl, "tokens/s", {}};
  Panel ttft{"Time to first token", xl, "milliseconds", {}};
  Panel tpot{"Time per output token", xl, "milliseconds", {}};
  Series done{"completed", {}, true}, good{"goodput (" + slo.to_string() + ")", {}, true}, offered{"offered", {}, false, true};
  Series out{"output tokens/s", {}, true};
  Series t50{"P50", {}, true}, t90{"P90", {}, true}, t99{"P99", {}, true};
  Series p50{"P50", {}, true}, p90{"P90", {}, true}, p99{"P99", {}, true};
  for (const auto& r : runs) {
    const RunSummary& s = r.summary;
    const double x = s.load;
    done.points.push_back({x, s.request_throughput});
    if (!slo.empty()) good.points.push_back({x, s.goodput});
    if (rate) offered.points.push_back({x, x});
    out.points.push_back({x, s.output_throughput});
    if (s.ttft.n) {
      t50.points.push_back({x, s.ttft.p50 * 1e3});
      t90.points.push_back({x, s.ttft.p90 * 1e3});
      t99.points.push_back({x, s.ttft.p99 * 1e3});
    }
    if (s.tpot.n) {
      p50.points.push_back({x, s.tpot.p50 * 1e3});
      p90.points.push_back({x, s.tpot.p90 * 1e3});
      p99.points.push_back({x, s.tpot.p99 * 1e3});
    }
  }
  thr.series.push_back(done);
  if (!slo.empty()) thr.series.push_back(good);
  if (rate) thr.series.push_back(offered);
  tok.series.push_back(out);
  ttft.series = {t50, t90, t99};
  tpot.series = {p50, p90, p99};
  return render_svg(std::string("mopt bench: throughput and latency vs ") + (rate ? "request rate" : "concurrency"),
                    {thr, tok, ttft, tpot}, 2);
}

std::string html_report(const nlohmann::json& config, const std::vector<RunResult>& runs, const SloSpec& slo) {
  std::string h = html_page_start("mopt bench report");
  h += "<h2>Configuration</h2>\n<pre>" + html_escape(config.dump(2)) + "</pre>\n";
  h += "<h2>Results</h2>\n<table><tr><th>load</th><th>ok</th><th>failed</th><th>req/s</th><th>goodput</th>"
       "<th>out tok/s</th><th>TTFT P50</th><th>TTFT P99</th><th>TPOT P50</th><th>TPOT P99</th><th>ITL P99</th>"
       "<th>E2E P99</th></tr>\n";
  for (const auto& r : runs) {
    const RunSummary& s = r.summary;
    h += strfmt("<tr><td>%s</td><td>%lld</td><td>%lld</td><td>%.2f</td><td>%s</td><td>%.1f</td><td>%.2f</td>"
                "<td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>\n",
                html_escape(s.label).c_str(), static_cast<long long>(s.completed - s.failed),
                static_cast<long long>(s.failed), s.request_throughput,
                slo.empty() ? "-" : strfmt("%.2f", s.goodput).c_str(), s.output_throughput, s.ttft.p50 * 1e3,
                s.ttft.p99 * 1e3, s.tpot.p50 * 1e3, s.tpot.p99 * 1e3, s.itl.p99 * 1e3, s.e2e.p99 * 1e3);
  }
  h += "</table>\n<p>Latencies in milliseconds. Percentiles: linear interpolation between closest ranks.</p>\n";
  if (runs.size() >= 2) h += "<h2>Load sweep</h2>\n" + sweep_chart(runs, slo);
  h += "<h2>Latency distributions</h2>\n" + cdf_chart(runs);
  h += "<h2>Per-run details</h2>\n";
  for (const auto& r : runs) h += "<pre>" + html_escape(format_summary(r, slo)) + "</pre>\n";
  h += "</body></html>\n";
  return h;
}

}  // namespace mopt::loadgen
