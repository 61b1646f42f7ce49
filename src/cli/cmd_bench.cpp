// mopt bench: a load generator for any OpenAI-compatible streaming endpoint (see docs/bench.md), and the
// hidden helper `mopt bench-fake-server`, a test server with injected, seeded delays.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "loadgen/bench_main.h"
#include "loadgen/fake_server.h"
#include "cli/commands.h"

namespace mopt::cli {
namespace {

using namespace mopt::loadgen;

struct BenchArgs {
  BenchOptions o;
  int concurrency = 0;
  std::string rate;
  std::string arrival = "poisson";
  std::string sweep_concurrency, sweep_rate;
  std::string duration, timeout = "600s", scrape_interval = "1s";
  std::string dataset = "synthetic";
  std::string input_len = "128", output_len;
  std::string progress = "auto";
  bool no_metrics = false, no_gpu = false;
};

int fail(const Status& s) {
  std::fprintf(stderr, "mopt bench: error: %s\n", s.message().c_str());
  return 1;
}

int run_bench_cmd(BenchArgs& a) {
  BenchOptions& o = a.o;
  if (a.concurrency > 0 && !a.rate.empty()) return fail(error("give either --concurrency or --rate, not both"));
  if (!a.sweep_concurrency.empty() && !a.sweep_rate.empty())
    return fail(error("give either --sweep-concurrency or --sweep-rate, not both"));
  if (!a.rate.empty() || !a.sweep_rate.empty()) {
    o.load.mode = LoadSpec::Mode::kRate;
    if (!a.rate.empty()) {
      if (a.rate == "inf") o.load.rate = INFINITY;
      else {
        auto r = parse_number(a.rate);
        if (!r || !(*r > 0)) return fail(error("--rate '%s': expected requests/s > 0 or 'inf'", a.rate.c_str()));
        o.load.rate = *r;
      }
    }
    if (!a.sweep_rate.empty()) {
      auto l = parse_list(a.sweep_rate, true);
      if (!l) return fail(l.status().with_context("--sweep-rate"));
      o.sweep = *l;
    }
  } else {
    o.load.mode = LoadSpec::Mode::kConcurrency;
    o.load.concurrency = a.concurrency > 0 ? a.concurrency : 1;
    if (!a.sweep_concurrency.empty()) {
      auto l = parse_list(a.sweep_concurrency, false);
      if (!l) return fail(l.status().with_context("--sweep-concurrency"));
      o.sweep = *l;
    }
  }
  if (a.arrival == "poisson") {
    if (o.load.burstiness != 1) return fail(error("--burstiness needs --arrival gamma"));
  } else if (a.arrival != "gamma") {
    return fail(error("--arrival must be 'poisson' or 'gamma' (got '%s')", a.arrival.c_str()));
  }
  if (!a.duration.empty()) {
    auto d = parse_duration(a.duration, 1);
    if (!d || !(*d > 0)) return fail(d ? error("--duration must be > 0") : d.status().with_context("--duration"));
    o.load.duration_s = *d;
  }
  if (o.load.num_requests <= 0 && o.load.duration_s <= 0) o.load.num_requests = 100;
  auto to = parse_duration(a.timeout, 1);
  if (!to || !(*to > 0)) return fail(error("--timeout '%s': expected a duration > 0", a.timeout.c_str()));
  o.target.timeout_s = *to;
  auto si = parse_duration(a.scrape_interval, 1);
  if (!si || !(*si >= 0.05)) return fail(error("--scrape-interval '%s': expected a duration >= 50ms", a.scrape_interval.c_str()));
  o.scrape_interval_s = *si;
  if (a.dataset == "synthetic") o.workload.kind = WorkloadOptions::Kind::kSynthetic;
  else if (a.dataset == "sharegpt") o.workload.kind = WorkloadOptions::Kind::kShareGpt;
  else if (a.dataset == "prompts") o.workload.kind = WorkloadOptions::Kind::kPromptFile;
  else return fail(error("--dataset must be synthetic, sharegpt or prompts (got '%s')", a.dataset.c_str()));
  if (o.workload.kind != WorkloadOptions::Kind::kSynthetic && o.workload.path.empty())
    return fail(error("--dataset %s needs --dataset-path FILE", a.dataset.c_str()));
  auto in = Distribution::parse(a.input_len, false);
  if (!in) return fail(in.status().with_context("--input-len"));
  o.workload.input_len = *in;
  o.workload.output_len_from_dataset = o.workload.kind == WorkloadOptions::Kind::kShareGpt && a.output_len.empty();
  auto out = Distribution::parse(a.output_len.empty() ? "128" : a.output_len, false);
  if (!out) return fail(out.status().with_context("--output-len"));
  o.workload.output_len = *out;
  o.workload.seed = o.load.seed;
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
  sub->add_option("--timeout", a->timeout, "Per-request timeout")->capture_default_str();
  // Load.
  sub->add_option("-c,--concurrency", a->concurrency, "Closed loop: requests kept in flight (default 1)");
  sub->add_option("-r,--rate", a->rate, "Open loop: requests/s (or 'inf': all at once)");
  sub->add_option("--arrival", a->arrival, "Arrival process for --rate: poisson or gamma")->capture_default_str();
  sub->add_option("--burstiness", o.load.burstiness, "Gamma shape (1 = Poisson; < 1 burstier)");
  sub->add_option("--max-concurrency", o.load.max_concurrency, "Cap on requests in flight with --rate (0 = none)");
  sub->add_option("--sweep-concurrency", a->sweep_concurrency, "Run once per concurrency, e.g. 1,2,4,8");
  sub->add_option("--sweep-rate", a->sweep_rate, "Run once per request rate, e.g. 5,10,20");
  sub->add_option("-n,--num-requests", o.load.num_requests, "Requests per run (default 100 unless --duration)");
  sub->add_option("--duration", a->duration, "Issue requests for this long per run, e.g. 60s");
  sub->add_option("--warmup", o.warmup, "Warm-up before measuring: N requests or a duration (5s)");
  sub->add_option("--seed", o.load.seed, "Seed for arrivals and synthetic prompts")->capture_default_str();
  // Workload.
  sub->add_option("--dataset", a->dataset, "synthetic, sharegpt or prompts")->capture_default_str();
  sub->add_option("--dataset-path", o.workload.path, "ShareGPT JSON file, or a prompt file (one prompt per line)");
  sub->add_option("--input-len", a->input_len, "Synthetic prompt words: N, uniform:A,B, normal:M,S, exp:M")
      ->capture_default_str();
  sub->add_option("--output-len", a->output_len, "max_tokens per request: N or a distribution (default 128)");
  sub->add_option("--shared-prefix-len", o.workload.shared_prefix_len, "Synthetic: words of a shared prompt prefix");
  sub->add_option("--num-prefixes", o.workload.num_prefixes, "Synthetic: distinct shared prefixes");
  // Measurement and output.
  sub->add_option("--slo", o.slo, "Goodput SLA, e.g. ttft=500ms,tpot=50ms,e2e=10s");
  sub->add_flag("--no-metrics", a->no_metrics, "Do not scrape the server's /metrics");
  sub->add_option("--metrics-prefix", o.metrics_prefix, "Metric name prefix to record")->capture_default_str();
  sub->add_option("--scrape-interval", a->scrape_interval, "How often to scrape /metrics and sample GPUs")
      ->capture_default_str();
  sub->add_flag("--no-gpu", a->no_gpu, "Do not sample GPUs through NVML");
  sub->add_option("-o,--output", o.output_json, "Write the JSON results (every request) here");
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
