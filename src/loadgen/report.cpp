#include "loadgen/report.h"

#include <algorithm>
#include <cmath>

#include "core/strings.h"

namespace mopt::loadgen {

using json = nlohmann::json;

Result<SloSpec> SloSpec::parse(const std::string& spec) {
  SloSpec s;
  for (const std::string& item : split_nonempty(spec, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return error("--slo item '%s': expected name=duration (e.g. ttft=500ms,tpot=50ms,e2e=10s)", item.c_str());
    const std::string name = item.substr(0, eq);
    auto v = parse_duration(item.substr(eq + 1), 1e-3);
    if (!v) return v.status().with_context("--slo " + name);
    if (name == "ttft") s.ttft_s = *v;
    else if (name == "tpot") s.tpot_s = *v;
    else if (name == "e2e") s.e2e_s = *v;
    else if (name == "itl") s.itl_s = *v;
    else return error("--slo: unknown metric '%s' (use ttft, tpot, itl or e2e)", name.c_str());
  }
  return s;
}

bool SloSpec::met_by(const RequestRecord& r) const {
  if (!r.ok()) return false;
  if (ttft_s >= 0 && !(r.ttft_s >= 0 && r.ttft_s <= ttft_s)) return false;
  if (e2e_s >= 0 && !(r.e2e_s <= e2e_s)) return false;
  if (tpot_s >= 0) {
    const double t = r.tpot_s();
    if (t >= 0 && t > tpot_s) return false;  // one-token answers have no TPOT and pass
  }
  if (itl_s >= 0)
    for (double g : r.itl_s)
      if (g > itl_s) return false;
  return true;
}

std::string SloSpec::to_string() const {
  std::string s;
  auto add = [&](const char* n, double v) {
    if (v < 0) return;
    if (!s.empty()) s += ",";
    s += strfmt("%s=%gms", n, v * 1e3);
  };
  add("ttft", ttft_s);
  add("tpot", tpot_s);
  add("itl", itl_s);
  add("e2e", e2e_s);
  return s;
}

RunSummary summarize_run(const PhaseResult& phase, const LoadSpec& spec, const SloSpec& slo) {
  RunSummary s;
  s.label = spec.label();
  s.load = spec.load_value();
  s.duration_s = phase.wall_s;
  s.not_started = phase.not_started;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : phase.records) {
    ++s.completed;
    if (!r.ok()) {
      ++s.failed;
      ++s.errors[error_kind_name(r.error)];
      continue;
    }
    s.input_tokens += r.prompt_tokens();
    s.output_tokens += r.output_tokens();
    if (r.usage_completion_tokens >= 0) ++s.usage_reported;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    if (const double t = r.tpot_s(); t >= 0) tpot.push_back(t);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    if (slo.met_by(r)) ++s.good;
  }
  s.ttft = summarize(std::move(ttft));
  s.tpot = summarize(std::move(tpot));
  s.itl = summarize(std::move(itl));
  s.e2e = summarize(std::move(e2e));
  s.client_lag = summarize(phase.client_lag_s);
  if (s.duration_s > 0) {
    const int64_t ok = s.completed - s.failed;
    s.request_throughput = static_cast<double>(ok) / s.duration_s;
    s.input_throughput = static_cast<double>(s.input_tokens) / s.duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / s.duration_s;
    s.goodput = static_cast<double>(s.good) / s.duration_s;
  }
  return s;
}

namespace {

std::string ms(double s) { return strfmt("%10.2f", s * 1e3); }

std::string latency_row(const char* name, const Summary& s) {
  if (s.n == 0) return strfmt("  %-6s %10s\n", name, "-");
  return strfmt("  %-6s", name) + ms(s.mean) + ms(s.p50) + ms(s.p90) + ms(s.p95) + ms(s.p99) + ms(s.p999) +
         ms(s.max) + strfmt(" %9zu\n", s.n);
}

}  // namespace

Result<unsigned> parse_percentile_metrics(const std::string& list) {
  unsigned rows = 0;
  for (const std::string& name : split_nonempty(list, ',')) {
    if (name == "ttft") rows |= kRowTtft;
    else if (name == "tpot") rows |= kRowTpot;
    else if (name == "itl") rows |= kRowItl;
    else if (name == "e2el") rows |= kRowE2e;
    else return error("--percentile-metrics: unknown metric '%s' (use ttft, tpot, itl, e2el)", name.c_str());
  }
  if (!rows) return error("--percentile-metrics: name at least one of ttft, tpot, itl, e2el");
  return rows;
}

std::string format_summary(const RunResult& run, const SloSpec& slo, unsigned rows) {
  const RunSummary& s = run.summary;
  std::string o;
  o += strfmt("== %s ==\n", s.label.c_str());
  o += strfmt("  requests      %lld ok, %lld failed", static_cast<long long>(s.completed - s.failed),
              static_cast<long long>(s.failed));
  if (s.not_started) o += strfmt(", %lld not started (duration ended)", static_cast<long long>(s.not_started));
  o += strfmt("   in %.2f s\n", s.duration_s);
  if (!s.errors.empty()) {
    o += "  errors       ";
    for (const auto& [k, n] : s.errors) o += strfmt(" %s=%lld", k.c_str(), static_cast<long long>(n));
    o += "\n";
    // One example message per kind helps the operator fix the cause.
    std::map<ErrorKind, const RequestRecord*> example;
    for (const auto& r : run.phase.records)
      if (!r.ok() && !example.count(r.error)) example[r.error] = &r;
    for (const auto& [k, r] : example)
      o += strfmt("    e.g. %s: %s\n", error_kind_name(k), r->error_message.substr(0, 160).c_str());
  }
  o += strfmt("  throughput    %.2f req/s   %.1f input tok/s   %.1f output tok/s\n", s.request_throughput,
              s.input_throughput, s.output_throughput);
  o += strfmt("  tokens        %lld in, %lld out (usage reported by the server for %lld of %lld ok requests)\n",
              static_cast<long long>(s.input_tokens), static_cast<long long>(s.output_tokens),
              static_cast<long long>(s.usage_reported), static_cast<long long>(s.completed - s.failed));
  if (!slo.empty())
    o += strfmt("  goodput       %.2f req/s  (%lld of %lld requests meet %s: %.1f%%)\n", s.goodput,
                static_cast<long long>(s.good), static_cast<long long>(s.completed), slo.to_string().c_str(),
                s.completed ? 100.0 * static_cast<double>(s.good) / static_cast<double>(s.completed) : 0.0);
  o += strfmt("  %-6s%10s%10s%10s%10s%10s%10s%10s %9s\n", "ms", "mean", "P50", "P90", "P95", "P99", "P99.9", "max",
              "samples");
  if (rows & kRowTtft) o += latency_row("TTFT", s.ttft);
  if (rows & kRowTpot) o += latency_row("TPOT", s.tpot);
  if (rows & kRowItl) o += latency_row("ITL", s.itl);
  if (rows & kRowE2e) o += latency_row("E2E", s.e2e);
  if (s.client_lag.n) o += latency_row("lag", s.client_lag);
  const MonitorResult& m = run.monitor;
  if (m.metrics_available) {
    o += "  server /metrics (" + m.metrics_note + "):\n";
    int shown = 0;
    for (const auto& d : m.deltas) {
      if (d.type != MetricType::kCounter || shown >= 12 || d.after == d.before) continue;
      o += strfmt("    %-50s +%g\n", d.key.c_str(), d.after - d.before);
      ++shown;
    }
    for (const auto& [k, g] : m.gauges)
      o += strfmt("    %-50s min %g  mean %.3g  max %g\n", k.c_str(), g.min, g.mean, g.max);
  } else if (!m.metrics_note.empty()) {
    o += "  " + m.metrics_note + "\n";
  }
  if (!m.gpu.empty()) {
    std::map<int, GaugeStats> util, mem;
    for (const auto& g : m.gpu) {
      auto upd = [](GaugeStats& st, double v) {
        if (st.samples == 0) st.min = st.max = v;
        st.min = std::min(st.min, v);
        st.max = std::max(st.max, v);
        st.mean += (v - st.mean) / ++st.samples;
      };
      upd(util[g.index], g.util_pct);
      upd(mem[g.index], g.mem_used_bytes);
    }
    for (const auto& [i, u] : util)
      o += strfmt("  GPU %d         util mean %.0f%% max %.0f%%, memory used max %s\n", i, u.mean, u.max,
                  format_bytes(mem[i].max).c_str());
  } else if (!m.gpu_note.empty()) {
    o += "  " + m.gpu_note + "\n";
  }
  return o;
}

std::string format_sweep_table(const std::vector<RunResult>& runs, const SloSpec& slo) {
  std::string o = strfmt("%-18s %8s %8s %10s %10s %10s %10s %10s %10s %7s\n", "load", "req/s", "goodput", "out tok/s",
                         "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "E2E P99", "errors");
  for (const auto& r : runs) {
    const RunSummary& s = r.summary;
    o += strfmt("%-18s %8.2f %8s %10.1f %10.2f %10.2f %10.2f %10.2f %10.2f %7lld\n", s.label.c_str(),
                s.request_throughput, slo.empty() ? "-" : strfmt("%.2f", s.goodput).c_str(), s.output_throughput,
                s.ttft.p50 * 1e3, s.ttft.p99 * 1e3, s.tpot.p50 * 1e3, s.tpot.p99 * 1e3, s.e2e.p99 * 1e3,
                static_cast<long long>(s.failed));
  }
  o += "(latencies in ms)\n";
  return o;
}

json summary_json(const RunSummary& s) {
  auto lat = [](const Summary& x) {
    return json{{"n", x.n},        {"mean", x.mean}, {"stddev", x.stddev}, {"min", x.min}, {"p50", x.p50},
                {"p90", x.p90},    {"p95", x.p95},   {"p99", x.p99},       {"p99_9", x.p999}, {"max", x.max}};
  };
  json j = {{"label", s.label},
            {"load", s.load},
            {"duration_s", s.duration_s},
            {"completed", s.completed},
            {"failed", s.failed},
            {"not_started", s.not_started},
            {"errors", s.errors},
            {"input_tokens", s.input_tokens},
            {"output_tokens", s.output_tokens},
            {"usage_reported", s.usage_reported},
            {"request_throughput", s.request_throughput},
            {"input_throughput", s.input_throughput},
            {"output_throughput", s.output_throughput},
            {"good", s.good},
            {"goodput", s.goodput},
            {"ttft_s", lat(s.ttft)},
            {"tpot_s", lat(s.tpot)},
            {"itl_s", lat(s.itl)},
            {"e2e_s", lat(s.e2e)}};
  if (s.client_lag.n) j["client_lag_s"] = lat(s.client_lag);
  return j;
}

json results_json(const json& config, const std::vector<RunResult>& runs, const SloSpec& slo) {
  json out = {{"tool", "mopt bench"}, {"format_version", 1}, {"config", config}, {"slo", slo.to_string()}};
  out["percentile_method"] = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)";
  json jr = json::array();
  for (const auto& r : runs) {
    json run = {{"label", r.summary.label}, {"summary", summary_json(r.summary)}};
    run["load"] = {{"mode", r.spec.mode == LoadSpec::Mode::kConcurrency ? "concurrency" : "rate"},
                   {"concurrency", r.spec.concurrency},
                   {"rate", std::isinf(r.spec.rate) ? json("inf") : json(r.spec.rate)},
                   {"burstiness", r.spec.burstiness},
                   {"max_concurrency", r.spec.max_concurrency},
                   {"num_requests", r.spec.num_requests},
                   {"duration_s", r.spec.duration_s},
                   {"seed", r.spec.seed}};
    json m = {{"available", r.monitor.metrics_available}, {"note", r.monitor.metrics_note}};
    json deltas = json::object();
    for (const auto& d : r.monitor.deltas)
      deltas[d.key] = {{"type", metric_type_name(d.type)}, {"before", d.before}, {"after", d.after},
                       {"delta", d.after - d.before}};
    m["deltas"] = deltas;
    json gauges = json::object();
    for (const auto& [k, g] : r.monitor.gauges)
      gauges[k] = {{"min", g.min}, {"mean", g.mean}, {"max", g.max}, {"samples", g.samples}};
    m["gauges"] = gauges;
    run["server_metrics"] = m;
    json gpu = {{"note", r.monitor.gpu_note}, {"samples", json::array()}};
    for (const auto& g : r.monitor.gpu)
      gpu["samples"].push_back({{"t_s", g.t_s}, {"gpu", g.index}, {"util_pct", g.util_pct},
                                {"mem_used_bytes", g.mem_used_bytes}, {"mem_total_bytes", g.mem_total_bytes}});
    run["gpu"] = gpu;
    json reqs = json::array();
    for (const auto& q : r.phase.records) {
      json jq = {{"index", q.index},
                 {"ok", q.ok()},
                 {"scheduled_s", q.scheduled_s},
                 {"start_s", q.start_s},
                 {"ttft_s", q.ttft_s >= 0 ? json(q.ttft_s) : json(nullptr)},
                 {"tpot_s", q.tpot_s() >= 0 ? json(q.tpot_s()) : json(nullptr)},
                 {"e2e_s", q.e2e_s},
                 {"itl_s", q.itl_s},
                 {"prompt_tokens", q.prompt_tokens()},
                 {"output_tokens", q.output_tokens()},
                 {"usage_prompt_tokens", q.usage_prompt_tokens >= 0 ? json(q.usage_prompt_tokens) : json(nullptr)},
                 {"usage_completion_tokens",
                  q.usage_completion_tokens >= 0 ? json(q.usage_completion_tokens) : json(nullptr)},
                 {"content_events", q.content_events},
                 {"expected_prompt_tokens", q.expected_prompt_tokens},
                 {"max_tokens", q.max_tokens},
                 {"http_status", q.http_status},
                 {"response_id", q.response_id}};
      if (!q.ok()) {
        jq["error"] = error_kind_name(q.error);
        jq["error_message"] = q.error_message;
      }
      if (!slo.empty()) jq["slo_met"] = slo.met_by(q);
      reqs.push_back(std::move(jq));
    }
    run["requests"] = std::move(reqs);
    jr.push_back(std::move(run));
  }
  out["runs"] = std::move(jr);
  return out;
}

}  // namespace mopt::loadgen
