#include "gate/gates.h"

#include <algorithm>
#include <cmath>

#include "core/strfmt.h"
#include "gate/fit.h"

namespace mopt::gate {

using json = nlohmann::json;

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kFail: return "FAIL";
    case Verdict::kSkip: return "skip";
    case Verdict::kError: return "ERROR";
  }
  return "?";
}

GateResult error_result(const std::string& name, const std::string& threshold, const std::string& why) {
  return GateResult{name, Verdict::kError, std::string(1, '-'), threshold, why};
}

GateResult leak_gate(const SoakResult& s, const Thresholds& t) {
  GateResult g;
  g.name = "leak";
  g.threshold = strfmt("< %g MB/h (upper %g%% bound of the slope, first %g%% of the soak left out)",
                       t.leak_mb_per_hour, t.leak_confidence * 100, t.leak_settle * 100);
  struct Series {
    const char* what;
    std::vector<double> hours, mb;
  };
  // Host: anonymous memory (heap, stacks); pages of mapped files are reclaimable and no leak.
  Series rss{"host anonymous RSS", {}, {}}, dev{"GPU memory", {}, {}};
  // The first leak_settle of the samples is left out: allocators and caches settle after the warm-up.
  const size_t skip = static_cast<size_t>(static_cast<double>(s.samples.size()) * t.leak_settle);
  for (size_t i = skip; i < s.samples.size(); ++i) {
    const MemorySample& m = s.samples[i];
    rss.hours.push_back(m.t_s / 3600);
    rss.mb.push_back(m.anon_bytes / 1e6);
    if (std::isfinite(m.device_bytes)) {
      dev.hours.push_back(m.t_s / 3600);
      dev.mb.push_back(m.device_bytes / 1e6);
    }
  }
  if (rss.hours.size() < 3)
    return error_result(g.name, g.threshold,
                        strfmt("%zu memory samples: too few for a fit (lengthen --soak)", rss.hours.size()));
  g.verdict = Verdict::kPass;
  for (const Series* se : {&rss, &dev}) {
    if (se->hours.size() < 3) continue;
    const LineFit f = fit_line(se->hours, se->mb);
    const double upper = f.upper(t.leak_confidence);
    const double span_s = (se->hours.back() - se->hours.front()) * 3600;
    if (!g.measured.empty()) g.measured += "; ";
    g.measured += strfmt("%s %+.3g MB/h (upper bound %.3g MB/h; %d samples over %.0f s)", se->what, f.slope, upper,
                         f.n, span_s);
    g.data[se == &rss ? "rss" : "device"] = {{"slope_mb_per_hour", f.slope},     {"slope_se", f.slope_se},
                                             {"upper_bound_mb_per_hour", upper}, {"r2", f.r2},
                                             {"samples", f.n},                   {"seconds", span_s},
                                             {"first_mb", se->mb.front()},        {"last_mb", se->mb.back()}};
    if (!(upper < t.leak_mb_per_hour)) {
      g.verdict = Verdict::kFail;
      g.detail += strfmt("%s grows: %.1f MB -> %.1f MB; ", se->what, se->mb.front(), se->mb.back());
    }
  }
  if (g.verdict == Verdict::kFail) g.detail += "the slope's upper bound is over the threshold";
  return g;
}

GateResult tail_gate(const SoakResult& s, const Thresholds& t) {
  GateResult g;
  g.name = "tail";
  g.threshold = strfmt("P99.9 E2E < %g ms", t.tail_p999_s * 1e3);
  const loadgen::Summary& e = s.run.summary.e2e;
  if (e.n == 0) return error_result(g.name, g.threshold, "no request succeeded during the soak");
  g.measured = strfmt("P99.9 %.1f ms (P99 %.1f, P50 %.1f, max %.1f; %zu requests)", e.p999 * 1e3, e.p99 * 1e3,
                      e.p50 * 1e3, e.max * 1e3, e.n);
  g.data = {{"p999_s", e.p999}, {"p99_s", e.p99}, {"p50_s", e.p50}, {"max_s", e.max}, {"requests", e.n}};
  g.verdict = e.p999 < t.tail_p999_s ? Verdict::kPass : Verdict::kFail;
  if (e.n < 1000)
    g.detail = strfmt("%zu requests: the P99.9 is interpolated between the slowest ones (1000+ measure it)", e.n);
  return g;
}

GateResult error_gate(const SoakResult& s, const Thresholds& t) {
  GateResult g;
  g.name = "errors";
  g.threshold = t.error_rate == 0 ? std::string("no failed request") : strfmt("error rate <= %g", t.error_rate);
  const loadgen::RunSummary& r = s.run.summary;
  if (r.completed == 0) return error_result(g.name, g.threshold, "no request finished during the soak");
  const double rate = static_cast<double>(r.failed) / static_cast<double>(r.completed);
  g.measured = strfmt("%lld of %lld failed (%.3g%%)", static_cast<long long>(r.failed),
                      static_cast<long long>(r.completed), rate * 100);
  json kinds = json::object();
  for (const auto& [k, n] : r.errors) {
    kinds[k] = n;
    g.detail += strfmt("%s%s: %lld", g.detail.empty() ? "" : ", ", k.c_str(), static_cast<long long>(n));
  }
  for (const auto& q : s.run.phase.records)
    if (!q.ok()) {
      g.detail += "; first: " + q.error_message.substr(0, 200);
      break;
    }
  g.data = {{"failed", r.failed}, {"finished", r.completed}, {"rate", rate}, {"kinds", kinds}};
  g.verdict = rate <= t.error_rate ? Verdict::kPass : Verdict::kFail;
  return g;
}

GateResult cuda_graph_gate(const SoakResult& s, bool is_cuda) {
  GateResult g;
  g.name = "cuda_graphs";
  g.threshold = "the server reports CUDA graphs captured and replayed";
  if (!is_cuda) {
    g.verdict = Verdict::kSkip;
    g.measured = std::string(1, '-');
    g.detail = "not applicable: the server runs on the CPU (CUDA graphs exist only on CUDA)";
    return g;
  }
  if (!s.metrics_ok) return error_result(g.name, g.threshold, "the server's /metrics could not be read after the soak");
  auto value = [&](const char* name) {  // over every label set (model_name: one per served model)
    bool found = false;
    const double v = s.final_metrics.sum(name, &found);
    return found ? v : NAN;
  };
  const double enabled = value("mopt:cuda_graphs_enabled"), captured = value("mopt:cuda_graphs_captured"),
               launches = value("mopt:cuda_graph_launches_total");
  if (std::isnan(enabled) || std::isnan(captured) || std::isnan(launches))
    return error_result(g.name, g.threshold, "the server's /metrics has no mopt:cuda_graphs_* lines (an older mopt?)");
  g.measured = strfmt("enabled %s, %.0f graphs captured, %.0f steps replayed", enabled > 0 ? "yes" : "no", captured,
                      launches);
  g.data = {{"enabled", enabled > 0}, {"captured", captured}, {"launches", launches}};
  g.verdict = enabled > 0 && captured > 0 && launches > 0 ? Verdict::kPass : Verdict::kFail;
  if (g.verdict == Verdict::kFail)
    g.detail = enabled > 0 ? "graphs are on but no decode step replayed one" : "graphs are off (--enforce-eager?)";
  return g;
}

GateResult restart_gate(const RestartTimes& r, const Thresholds& t) {
  GateResult g;
  g.name = "restart";
  g.threshold = strfmt("slowest start to first answer < %g s", t.restart_s);
  if (r.seconds.empty()) return error_result(g.name, g.threshold, "no restart was timed");
  const double worst = *std::max_element(r.seconds.begin(), r.seconds.end());
  std::string each;
  for (size_t i = 0; i < r.seconds.size(); ++i)
    each += strfmt("%s%.2f s (ready %.2f s)", i ? ", " : "", r.seconds[i], r.ready_s[i]);
  g.measured = strfmt("slowest %.2f s of %zu: %s", worst, r.seconds.size(), each.c_str());
  g.data = {{"seconds", r.seconds}, {"ready_seconds", r.ready_s}, {"slowest_s", worst}};
  g.verdict = worst < t.restart_s ? Verdict::kPass : Verdict::kFail;
  return g;
}

}  // namespace mopt::gate
