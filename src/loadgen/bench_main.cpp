#include "loadgen/bench_main.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/strings.h"
#include "loadgen/charts.h"
#include "loadgen/monitor.h"
#include "loadgen/net.h"
#include "loadgen/random_prompts.h"

namespace mopt::loadgen {

using json = nlohmann::json;

Result<std::vector<double>> parse_list(const std::string& s, bool allow_inf) {
  std::vector<double> out;
  for (const std::string& item : split_nonempty(s, ',')) {
    if (allow_inf && item == "inf") {
      out.push_back(INFINITY);
      continue;
    }
    auto v = parse_number(item);
    if (!v || !(*v > 0)) return error("'%s' in list '%s' is not a positive number", item.c_str(), s.c_str());
    out.push_back(*v);
  }
  if (out.empty()) return error("empty list '%s' (expected e.g. 1,2,4,8)", s.c_str());
  return out;
}


Result<std::vector<RunResult>> run_bench(BenchOptions o) {
  MOPT_ASSIGN_OR_RETURN(Url url, parse_url(o.url));
  if (o.endpoint != "completions" && o.endpoint != "chat")
    return error("--endpoint must be 'completions' or 'chat' (got '%s')", o.endpoint.c_str());
  Target t = o.target;
  t.host = url.host;
  t.port = url.port;
  t.chat = o.endpoint == "chat";
  const std::string def = t.chat ? "/v1/chat/completions" : "/v1/completions";
  std::string p = url.path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p.empty() || p == "/") t.path = def;
  else if (p.size() >= 3 && p.compare(p.size() - 3, 3, "/v1") == 0) t.path = p + def.substr(3);
  else t.path = p;
  if (!t.extra_body.empty()) {
    json e = json::parse(t.extra_body, nullptr, false);
    if (e.is_discarded() || !e.is_object())
      return error("--extra-body must be a JSON object, e.g. '{\"temperature\": 0}'");
  }
  MOPT_ASSIGN_OR_RETURN(SloSpec slo, SloSpec::parse(o.slo));
  if (o.load.num_requests < 0) return error("--num-requests must be >= 0");

  // Pre-flight: a clear message when nothing listens there (any HTTP answer, even 404, is fine).
  if (auto h = http_get(t.host, t.port, "/health", 10.0); !h && h.message().find("connect") != std::string::npos)
    return error("cannot reach the server at %s: %s (is it running? check --url)", o.url.c_str(), h.message().c_str());

  // No --model: ask the server which model it serves (GET /v1/models, the first id), as OpenAI clients do.
  const std::string base = t.path.substr(0, t.path.rfind("/v1/") == std::string::npos ? 0 : t.path.rfind("/v1/"));
  if (t.model.empty()) {
    if (auto m = http_get(t.host, t.port, base + "/v1/models", 10.0); m && m->status == 200) {
      json j = json::parse(m->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
        t.model = j["data"][0]["id"].get<std::string>();
    }
  }
  // --dataset random counts its prompts' tokens with the server's tokenizer (POST /tokenize).
  MOPT_ASSIGN_OR_RETURN(Workload workload,
                        Workload::create(o.workload, server_token_counter(t.host, t.port, base, t.model)));
  const bool local = is_local_host(t.host);
  json config = {{"url", o.url},
                 {"request_path", t.path},
                 {"endpoint", o.endpoint},
                 {"model", t.model},
                 {"workload", workload.describe()},
                 {"mode", o.load.mode == LoadSpec::Mode::kConcurrency ? "concurrency" : "rate"},
                 {"burstiness", o.load.burstiness},
                 {"max_concurrency", o.load.max_concurrency},
                 {"num_requests", o.load.num_requests},
                 {"duration_s", o.load.duration_s},
                 {"warmup", o.warmup},
                 {"seed", o.load.seed},
                 {"ignore_eos", t.ignore_eos},
                 {"timeout_s", t.timeout_s},
                 {"server_is_local", local}};
  std::fprintf(stdout, "mopt bench: %s %s, %s\n", o.url.c_str(), t.path.c_str(), workload.describe().c_str());
  std::fflush(stdout);

  // Warm-up: same load shape, results discarded, drained before measuring.
  if (o.warmup != "0" && !o.warmup.empty()) {
    LoadSpec w = o.load;
    if (!o.sweep.empty()) {
      if (w.mode == LoadSpec::Mode::kConcurrency) w.concurrency = static_cast<int>(o.sweep.front());
      else w.rate = o.sweep.front();
    }
    const bool is_count = o.warmup.find_first_not_of("0123456789") == std::string::npos;
    if (is_count) {
      auto n = parse_number(o.warmup);
      if (!n || *n < 0 || *n > 1e9) return error("--warmup '%s': expected a request count or a duration", o.warmup.c_str());
      w.num_requests = static_cast<int64_t>(*n);
      w.duration_s = 0;
    } else {
      MOPT_ASSIGN_OR_RETURN(double d, parse_duration(o.warmup, 1));
      w.num_requests = 0;
      w.duration_s = d;
    }
    w.seed = o.load.seed + 0x77;
    ProgressPrinter pp(o.progress, "warmup");
    auto r = run_phase(t, workload, w, [&](const LiveStats& s) { pp.update(s); });
    pp.finish();
    if (!r) return r.status().with_context("warm-up");
    int64_t failed = 0;
    const RequestRecord* first_fail = nullptr;
    for (const auto& q : r->records)
      if (!q.ok()) {
        ++failed;
        if (!first_fail) first_fail = &q;
      }
    if (first_fail && failed == static_cast<int64_t>(r->records.size()))
      return error("every warm-up request failed (%s: %s); fix that before measuring", error_kind_name(first_fail->error),
                   first_fail->error_message.c_str());
    std::fprintf(stdout, "warm-up: %zu requests (%lld failed) in %.2f s\n", r->records.size(),
                 static_cast<long long>(failed), r->wall_s);
  }

  std::vector<double> points = o.sweep;
  if (points.empty()) points.push_back(o.load.load_value());
  std::vector<RunResult> runs;
  for (double v : points) {
    RunResult run;
    run.spec = o.load;
    if (run.spec.mode == LoadSpec::Mode::kConcurrency) {
      if (v != std::floor(v) || v < 1 || v > 100000) return error("concurrency %g must be an integer in [1, 100000]", v);
      run.spec.concurrency = static_cast<int>(v);
    } else {
      run.spec.rate = v;
    }
    Monitor mon(t.host, t.port, o.metrics_prefix, o.scrape_interval_s, o.gpu && local);
    if (o.metrics) mon.start();
    ProgressPrinter pp(o.progress, run.spec.label());
    auto r = run_phase(t, workload, run.spec, [&](const LiveStats& s) { pp.update(s); });
    pp.finish();
    if (o.metrics) run.monitor = mon.stop();
    else run.monitor.metrics_note = "server metrics not collected (--no-metrics)";
    if (!r) return r.status().with_context(run.spec.label());
    run.phase = std::move(r).value();
    run.summary = summarize_run(run.phase, run.spec, slo);
    std::fputs(format_summary(run, slo, o.latency_rows).c_str(), stdout);
    std::fflush(stdout);
    runs.push_back(std::move(run));
  }
  if (runs.size() >= 2) std::fputs(("\n" + format_sweep_table(runs, slo)).c_str(), stdout);

  if (!o.output_json.empty()) {
    MOPT_TRY(write_file(o.output_json, results_json(config, runs, slo).dump(1)));
    std::fprintf(stdout, "wrote %s\n", o.output_json.c_str());
  }
  if (!o.svg_dir.empty()) {
    mkdir(o.svg_dir.c_str(), 0755);
    MOPT_TRY(write_file(o.svg_dir + "/latency_cdf.svg", cdf_chart(runs)));
    std::fprintf(stdout, "wrote %s/latency_cdf.svg\n", o.svg_dir.c_str());
    if (runs.size() >= 2) {
      MOPT_TRY(write_file(o.svg_dir + "/sweep.svg", sweep_chart(runs, slo)));
      std::fprintf(stdout, "wrote %s/sweep.svg\n", o.svg_dir.c_str());
    }
  }
  if (!o.html.empty()) {
    MOPT_TRY(write_file(o.html, html_report(config, runs, slo)));
    std::fprintf(stdout, "wrote %s\n", o.html.c_str());
  }
  return runs;
}

}  // namespace mopt::loadgen
