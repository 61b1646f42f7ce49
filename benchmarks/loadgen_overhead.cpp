// bench_overhead: how fast and how precise is mopt bench itself? Runs the bench client against the in-process
// zero-delay fake server (its own thread; client and server share this machine's cores) and reports:
//   1. closed loop at several concurrencies: sustained streaming requests/s and tokens/s, client CPU per request;
//   2. open loop at a fixed rate (default 1,000 req/s, Poisson): achieved rate and how late requests start;
//   3. the latency the client adds: for every SSE event, client receive timestamp minus the server's send
//      timestamp (the fake server echoes now_ns() in "mopt_sent_ns"; both use CLOCK_MONOTONIC).
// Usage: bench_overhead [--tokens 16] [--requests 20000] [--rate 1000] [--seconds 10]
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "loadgen/fake_server.h"
#include "loadgen/load.h"
#include "loadgen/report.h"

using namespace mopt::loadgen;

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

void print_lag(const RunSummary& s) {
  std::printf("    client-added latency (server send -> client timestamp), %zu events: "
              "P50 %.1f us  P90 %.1f us  P99 %.1f us  P99.9 %.1f us  max %.1f us\n",
              s.client_lag.n, s.client_lag.p50 * 1e6, s.client_lag.p90 * 1e6, s.client_lag.p99 * 1e6,
              s.client_lag.p999 * 1e6, s.client_lag.max * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 16;
  int64_t requests = 20000;
  double rate = 1000, seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokens") tokens = std::atoi(argv[i + 1]);
    else if (k == "--requests") requests = std::atoll(argv[i + 1]);
    else if (k == "--rate") rate = std::atof(argv[i + 1]);
    else if (k == "--seconds") seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 1;
    }
  }
  FakeServerOptions fo;
  fo.echo_timestamps = true;
  fo.record = false;
  auto srv = FakeServer::start(fo);
  if (!srv) {
    std::fprintf(stderr, "fake server: %s\n", srv.message().c_str());
    return 1;
  }
  Target t;
  t.port = (*srv)->port();
  t.model = "fake";
  WorkloadOptions wo;
  wo.input_len = Distribution::fixed(32);
  wo.output_len = Distribution::fixed(tokens);
  std::printf("bench_overhead: zero-delay fake server, %d output tokens per request, 32-word prompts\n", tokens);

  std::printf("1. closed loop, %lld requests per point\n", static_cast<long long>(requests));
  for (int c : {1, 16, 64, 256}) {
    auto w = Workload::create(wo);
    LoadSpec spec;
    spec.concurrency = c;
    spec.num_requests = c == 1 ? requests / 4 : requests;
    const double cpu0 = thread_cpu_s(), pcpu0 = process_cpu_s();
    auto r = run_phase(t, *w, spec);
    const double cpu = thread_cpu_s() - cpu0, pcpu = process_cpu_s() - pcpu0;
    if (!r) {
      std::fprintf(stderr, "run failed: %s\n", r.message().c_str());
      return 1;
    }
    const RunSummary s = summarize_run(*r, spec, SloSpec{});
    std::printf("  concurrency %3d: %8.0f req/s  %9.0f tok/s  failed %lld  client CPU %.1f us/req "
                "(client+server %.1f us/req)  TTFT P50 %.3f ms P99 %.3f ms\n",
                c, s.request_throughput, s.output_throughput, static_cast<long long>(s.failed),
                cpu / static_cast<double>(spec.num_requests) * 1e6,
                pcpu / static_cast<double>(spec.num_requests) * 1e6, s.ttft.p50 * 1e3, s.ttft.p99 * 1e3);
    print_lag(s);
  }

  std::printf("2. open loop: Poisson arrivals at %.0f req/s for %.0f s\n", rate, seconds);
  {
    auto w = Workload::create(wo);
    LoadSpec spec;
    spec.mode = LoadSpec::Mode::kRate;
    spec.rate = rate;
    spec.duration_s = seconds;
    spec.seed = 1;
    auto r = run_phase(t, *w, spec);
    if (!r) {
      std::fprintf(stderr, "run failed: %s\n", r.message().c_str());
      return 1;
    }
    const RunSummary s = summarize_run(*r, spec, SloSpec{});
    std::vector<double> late;
    for (const auto& q : r->records) late.push_back(q.start_s - q.scheduled_s);
    const Summary l = summarize(late);
    const double issued = static_cast<double>(r->records.size());
    std::printf("  issued %.0f requests (%.1f req/s offered), completed %.1f req/s, %.0f tok/s, failed %lld\n", issued,
                issued / seconds, s.request_throughput, s.output_throughput, static_cast<long long>(s.failed));
    std::printf("  start lateness vs the arrival schedule: P50 %.1f us  P99 %.1f us  max %.1f us\n", l.p50 * 1e6,
                l.p99 * 1e6, l.max * 1e6);
    std::printf("  TTFT P50 %.3f ms  P99 %.3f ms   E2E P50 %.3f ms  P99 %.3f ms\n", s.ttft.p50 * 1e3, s.ttft.p99 * 1e3,
                s.e2e.p50 * 1e3, s.e2e.p99 * 1e3);
    print_lag(s);
  }
  (*srv)->stop();
  return 0;
}
