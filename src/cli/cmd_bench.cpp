// mopt bench: a load generator for any OpenAI-compatible streaming endpoint (see docs/bench.md), and the
// hidden helper `mopt bench-fake-server`, a test server with injected, seeded delays.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "core/strings.h"
#include "loadgen/bench_main.h"
#include "loadgen/fake_server.h"

namespace mopt::cli {
namespace {

using namespace mopt::loadgen;

struct BenchArgs {
  BenchOptions o;
  LoadFlags load;
  std::string sweep_concurrency, sweep_rate;
  std::string scrape_interval = "1s";
  std::string progress = "auto";
  bool no_metrics = false, no_gpu = false;
  // vLLM benchmark_serving's spellings of -o: --save-result [--result-dir D] [--result-filename F].
  bool save_result = false;
  std::string result_dir, result_filename;
  std::string percentile_metrics, metric_percentiles;  // vLLM's: the latency rows; the percentiles asked for
};

// --metric-percentiles: each asked-for percentile must be a column of the table (which shows them all).
Status check_metric_percentiles(const std::string& list) {
  for (const std::string& p : split_nonempty(list, ','))
    if (p != "50" && p != "90" && p != "95" && p != "99" && p != "99.9")
      return error("--metric-percentiles: '%s' is not a column of the summary table, which shows P50, P90, P95, P99 "
                   "and P99.9 (the JSON output has every request, for any other)", p.c_str());
  return Status::ok();
}

// The -o path vLLM's --save-result flags name: D/F, F defaulting to mopt-bench-YYYYMMDD-HHMMSS.json (local time).
Result<std::string> saved_result_path(const BenchArgs& a) {
  if (!a.save_result) {
    if (!a.result_dir.empty() || !a.result_filename.empty())
      return error("--result-dir and --result-filename name the file of --save-result: add --save-result");
    return a.o.output_json;
  }
  if (!a.o.output_json.empty()) return error("give either -o/--output or --save-result, not both");
  std::string name = a.result_filename;
  if (name.empty()) {
    const std::time_t now = std::time(nullptr);
    char buf[64];
    std::strftime(buf, sizeof buf, "mopt-bench-%Y%m%d-%H%M%S.json", std::localtime(&now));
    name = buf;
  }
  return a.result_dir.empty() ? name : a.result_dir + "/" + name;
}

int fail(const Status& s) {
  std::fprintf(stderr, "mopt bench: error: %s\n", s.message().c_str());
  return 1;
}

int run_bench_cmd(BenchArgs& a) {
  BenchOptions& o = a.o;
  if (!a.sweep_concurrency.empty() && !a.sweep_rate.empty())
    return fail(error("give either --sweep-concurrency or --sweep-rate, not both"));
  if (Status st = resolve_load_flags(a.load, !a.sweep_rate.empty(), o.load, o.workload, o.target.timeout_s); !st)
    return fail(st);
  if (!a.sweep_rate.empty()) {
    auto l = parse_list(a.sweep_rate, true);
    if (!l) return fail(l.status().with_context("--sweep-rate"));
    o.sweep = *l;
  }
  if (!a.sweep_concurrency.empty()) {
    if (o.load.mode == LoadSpec::Mode::kRate) return fail(error("--sweep-concurrency sweeps a closed loop: drop --rate"));
    auto l = parse_list(a.sweep_concurrency, false);
    if (!l) return fail(l.status().with_context("--sweep-concurrency"));
    o.sweep = *l;
  }
  if (o.load.num_requests <= 0 && o.load.duration_s <= 0) o.load.num_requests = 100;
  if (!a.percentile_metrics.empty()) {
    auto rows = parse_percentile_metrics(a.percentile_metrics);
    if (!rows) return fail(rows.status());
    o.latency_rows = *rows;
  }
  if (!a.metric_percentiles.empty())
    if (Status st = check_metric_percentiles(a.metric_percentiles); !st) return fail(st);
  auto out_path = saved_result_path(a);
  if (!out_path) return fail(out_path.status());
  o.output_json = *out_path;
  auto si = parse_duration(a.scrape_interval, 1);
  if (!si || !(*si >= 0.05)) return fail(error("--scrape-interval '%s': expected a duration >= 50ms", a.scrape_interval.c_str()));
  o.scrape_interval_s = *si;
  if (o.target.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.target.api_key = k;
  o.metrics = !a.no_metrics;
  o.gpu = !a.no_gpu;
  if (a.progress == "auto") o.progress = ProgressPrinter::Style::kAuto;
  else if (a.progress == "bar") o.progress = ProgressPrinter::Style::kBar;
  else if (a.progress == "lines") o.progress = ProgressPrinter::Style::kLines;
  else if (a.progress == "off") o.progress = ProgressPrinter::Style::kOff;
  else return fail(error("--progress must be auto, bar, lines or off"));
  auto runs = run_bench(o);
  if (!runs) return fail(runs.status());
  int64_t ok = 0;
  for (const auto& r : *runs) ok += r.summary.completed - r.summary.failed;
  if (ok == 0) {
    std::fprintf(stderr, "mopt bench: every request failed (see the errors above)\n");
    return 2;
  }
  return 0;
}

struct FakeArgs {
  FakeServerOptions o;
  std::string ttft = "0", itl = "0", itl_per_running = "0", port_file;
};

int run_fake_server(FakeArgs& a) {
  auto ttft = Distribution::parse(a.ttft, true);
  if (!ttft) return fail(ttft.status().with_context("--ttft"));
  auto itl = Distribution::parse(a.itl, true);
  if (!itl) return fail(itl.status().with_context("--itl"));
  auto ipr = parse_duration(a.itl_per_running, 1e-3);
  if (!ipr) return fail(ipr.status().with_context("--itl-per-running"));
  a.o.ttft = *ttft;
  a.o.itl = *itl;
  a.o.itl_per_running_s = *ipr;
  a.o.record = false;
  // Block the stop signals before the server thread starts so that only sigwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto srv = FakeServer::start(a.o);
  if (!srv) return fail(srv.status());
  std::fprintf(stdout, "fake server listening on http://%s:%d (ttft %s, itl %s)\n", a.o.host.c_str(), (*srv)->port(),
               a.o.ttft.to_string(true).c_str(), a.o.itl.to_string(true).c_str());
  std::fflush(stdout);
  if (!a.port_file.empty()) {
    const std::string tmp = a.port_file + ".tmp";
    std::ofstream(tmp) << (*srv)->port() << "\n";
    std::rename(tmp.c_str(), a.port_file.c_str());
  }
  int sig = 0;
  sigwait(&set, &sig);
  (*srv)->stop();
  std::fprintf(stdout, "fake server: served %llu requests\n", static_cast<unsigned long long>((*srv)->requests_served()));
  return 0;
}

Registration reg("bench", 80, [](CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  BenchOptions& o = a->o;
  auto* sub = app.add_subcommand("bench", "Load-test an OpenAI-compatible server: TTFT, TPOT, ITL, percentiles, goodput");
  sub->add_option("--url", o.url, "Server base URL (http://host:port), or a full endpoint URL")->capture_default_str();
  sub->add_option("--endpoint", o.endpoint, "completions or chat")->capture_default_str();
  sub->add_option("--model", o.target.model, "Model name sent in requests (default: the first id of GET /v1/models)");
  sub->add_option("--api-key", o.target.api_key, "Bearer token (default: $OPENAI_API_KEY)");
  sub->add_flag("--ignore-eos", o.target.ignore_eos, "Send \"ignore_eos\": true so every request runs to max_tokens");
  sub->add_option("--extra-body", o.target.extra_body, "JSON object merged into each request body");
  add_load_flags(sub, a->load, o.load, o.workload);
  sub->add_option("--sweep-concurrency", a->sweep_concurrency, "Run once per concurrency, e.g. 1,2,4,8");
  sub->add_option("--sweep-rate", a->sweep_rate, "Run once per request rate, e.g. 5,10,20");
  sub->add_option("--warmup", o.warmup, "Warm-up before measuring: N requests or a duration (5s)");
  // Measurement and output.
  sub->add_option("--slo", o.slo, "Goodput SLA, e.g. ttft=500ms,tpot=50ms,e2e=10s");
  sub->add_flag("--no-metrics", a->no_metrics, "Do not scrape the server's /metrics");
  sub->add_option("--metrics-prefix", o.metrics_prefix, "Metric name prefix to record")->capture_default_str();
  sub->add_option("--scrape-interval", a->scrape_interval, "How often to scrape /metrics and sample GPUs")
      ->capture_default_str();
  sub->add_flag("--no-gpu", a->no_gpu, "Do not sample GPUs through NVML");
  sub->add_option("-o,--output", o.output_json, "Write the JSON results (every request) here");
  sub->add_flag("--save-result", a->save_result,
                "vLLM's spelling of -o: write the JSON results to --result-dir/--result-filename "
                "(default ./mopt-bench-YYYYMMDD-HHMMSS.json)");
  sub->add_option("--result-dir", a->result_dir, "--save-result: the folder (default: the current one)");
  sub->add_option("--result-filename", a->result_filename, "--save-result: the file name");
  sub->add_option("--percentile-metrics", a->percentile_metrics,
                  "Latency rows of the summary table: ttft,tpot,itl,e2el (default: all)");
  sub->add_option("--metric-percentiles", a->metric_percentiles,
                  "Percentiles asked for (vLLM's flag); each must be one the table shows: 50, 90, 95, 99, 99.9");
  sub->add_option("--svg-dir", o.svg_dir, "Write latency_cdf.svg (and sweep.svg) into this directory");
  sub->add_option("--html", o.html, "Write a self-contained HTML report here");
  sub->add_option("--progress", a->progress, "auto, bar, lines or off")->capture_default_str();
  sub->callback([a] { set_exit_code(run_bench_cmd(*a)); });

  auto f = std::make_shared<FakeArgs>();
  auto* fs = app.add_subcommand("bench-fake-server", "Test server with injected delays (for mopt bench tests)");
  fs->group("");  // hidden from --help
  fs->add_option("--host", f->o.host, "Address to listen on")->capture_default_str();
  fs->add_option("--port", f->o.port, "Port (0: pick a free one)")->capture_default_str();
  fs->add_option("--port-file", f->port_file, "Write the chosen port to this file");
  fs->add_option("--ttft", f->ttft, "First-token delay distribution, e.g. uniform:20ms,40ms");
  fs->add_option("--itl", f->itl, "Inter-token gap distribution, e.g. exp:5ms");
  fs->add_option("--itl-per-running", f->itl_per_running, "Extra gap per running stream (mimics batching)");
  fs->add_option("--max-running", f->o.max_running, "Streams served at once (others queue; 0 = unlimited)");
  fs->add_option("--max-tokens", f->o.default_max_tokens, "Tokens when the request has no max_tokens");
  fs->add_option("--seed", f->o.seed, "Seed for the delays");
  fs->add_option("--error-rate", f->o.error_rate, "Fraction of requests answered with HTTP 500");
  fs->add_flag("--echo-timestamps", f->o.echo_timestamps, "Add mopt_sent_ns to every chunk");
  fs->callback([f] { set_exit_code(run_fake_server(*f)); });
});

}  // namespace
}  // namespace mopt::cli
