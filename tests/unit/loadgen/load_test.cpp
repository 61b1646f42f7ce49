// The bench client against the in-process fake server: accuracy of the reported latencies against the
// injected (seeded) delays, token accounting, load modes and error classification.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "loadgen/fake_server.h"
#include "loadgen/load.h"
#include "loadgen/report.h"

namespace mopt::loadgen {
namespace {

struct Rig {
  std::unique_ptr<FakeServer> server;
  Target target;
  explicit Rig(FakeServerOptions o, bool chat = false) {
    auto s = FakeServer::start(o);
    EXPECT_TRUE(s) << s.message();
    server = std::move(s).value();
    target.port = server->port();
    target.chat = chat;
    target.path = chat ? "/v1/chat/completions" : "/v1/completions";
    target.model = "fake";
  }
};

Workload synthetic(int in_words, int out_tokens, uint64_t seed = 1) {
  WorkloadOptions w;
  w.input_len = Distribution::fixed(in_words);
  w.output_len = Distribution::fixed(out_tokens);
  w.seed = seed;
  auto r = Workload::create(w);
  EXPECT_TRUE(r);
  return std::move(r).value();
}

// Acceptance 1. The fake server draws TTFT ~ uniform(20ms, 40ms) and inter-token gaps ~ exponential(mean 4ms)
// from seeded generators (per request index), so the injected sample is fixed. It also records when it actually
// sent each token. Claims:
//  (A) the client's own error: reported TTFT/ITL percentiles match those of the server's actual send times
//      within 1 ms + 2% (P99: 3 ms + 5%), and the median per-request TTFT excess over the actual send is < 1 ms;
//  (B) end to end: reported P50/P90/P99 of TTFT and ITL match the injected sample within 2 ms + 3%
//      (P99: 4 ms + 5%), and the true distribution quantiles within that plus 4 standard errors of the sample
//      quantile (se = sqrt(q(1-q)/n) / f(x_q)).
// On an idle machine the error is ~0.1-0.5 ms. A timing claim cannot hold on a starved CPU (a 2-core machine
// running compilers delays wake-ups by several ms), so the measurement is attempted up to 3 times and must pass
// in one; every attempt's deviations are printed.
namespace {
// Sanitizer builds slow every event by several times and change wake-up timing: they still run the whole
// pipeline and the exact accounting checks, but the timing tolerances are asserted in release builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

struct Attempt {
  std::vector<std::string> fails;
  void near(const std::string& what, double got, double want, double tol) {
    if (!(std::fabs(got - want) <= tol))
      fails.push_back(strfmt("%s: reported %.3f ms, expected %.3f ms +- %.3f ms", what.c_str(), got * 1e3, want * 1e3,
                             tol * 1e3));
  }
};

Attempt accuracy_attempt() {
  Attempt a;
  FakeServerOptions o;
  o.ttft = *Distribution::parse("uniform:20ms,40ms", true);
  o.itl = *Distribution::parse("exp:4ms", true);
  o.seed = 11;
  Rig rig(o);
  Workload w = synthetic(32, 16);
  LoadSpec spec;
  spec.concurrency = 8;
  spec.num_requests = 160;
  auto res = run_phase(rig.target, w, spec);
  if (!res) return {{res.message()}};
  const auto injected = rig.server->injected();
  if (injected.size() != 160u) return {{"server saw " + std::to_string(injected.size()) + " requests"}};
  std::map<std::string, const InjectedRequest*> by_id;
  for (const auto& r : injected) by_id[r.id] = &r;
  std::vector<double> inj_ttft, inj_itl, sent_ttft, sent_itl, excess;
  for (const auto& r : res->records) {
    // Exact per-request accounting (no tolerance).
    EXPECT_TRUE(r.ok()) << r.error_message;
    EXPECT_EQ(r.content_events, 16);
    EXPECT_EQ(r.usage_completion_tokens, 16);
    EXPECT_EQ(r.usage_prompt_tokens, 32);
    EXPECT_EQ(r.itl_s.size(), 15u);
    if (!by_id.count(r.response_id)) return {{"unknown response id " + r.response_id}};
    const InjectedRequest& inj = *by_id[r.response_id];
    EXPECT_GE(r.ttft_s, inj.ttft_s - 1e-4) << "measured TTFT below the injected delay";
    inj_ttft.push_back(inj.ttft_s);
    inj_itl.insert(inj_itl.end(), inj.itl_s.begin(), inj.itl_s.end());
    sent_ttft.push_back(inj.sent_ttft_s);
    sent_itl.insert(sent_itl.end(), inj.sent_itl_s.begin(), inj.sent_itl_s.end());
    excess.push_back(r.ttft_s - inj.sent_ttft_s);
  }
  const RunSummary sum = summarize_run(*res, spec, SloSpec{});
  EXPECT_EQ(sum.completed, 160);
  EXPECT_EQ(sum.failed, 0);
  EXPECT_EQ(sum.output_tokens, 160 * 16);
  EXPECT_EQ(sum.input_tokens, 160 * 32);
  std::sort(inj_ttft.begin(), inj_ttft.end());
  std::sort(inj_itl.begin(), inj_itl.end());
  std::sort(sent_ttft.begin(), sent_ttft.end());
  std::sort(sent_itl.begin(), sent_itl.end());
  auto tol_client = [](double p, double v) { return p >= 99 ? 0.003 + 0.05 * v : 0.001 + 0.02 * v; };
  auto tol_e2e = [](double p, double v) { return p >= 99 ? 0.004 + 0.05 * v : 0.002 + 0.03 * v; };
  const double ps[] = {50, 90, 99};
  const double rep_ttft[] = {sum.ttft.p50, sum.ttft.p90, sum.ttft.p99};
  const double rep_itl[] = {sum.itl.p50, sum.itl.p90, sum.itl.p99};
  for (int i = 0; i < 3; ++i) {
    const double p = ps[i], q = p / 100;
    const std::string P = strfmt(" P%g", p);
    // (A)
    const double st = percentile_sorted(sent_ttft, p), si = percentile_sorted(sent_itl, p);
    a.near("(A) TTFT" + P + " vs actual sends", rep_ttft[i], st, tol_client(p, st));
    a.near("(A) ITL" + P + " vs actual sends", rep_itl[i], si, tol_client(p, si));
    // (B)
    const double it = percentile_sorted(inj_ttft, p), ii = percentile_sorted(inj_itl, p);
    a.near("(B) TTFT" + P + " vs injected", rep_ttft[i], it, tol_e2e(p, it));
    a.near("(B) ITL" + P + " vs injected", rep_itl[i], ii, tol_e2e(p, ii));
    const double se_ttft = std::sqrt(q * (1 - q) / inj_ttft.size()) * 0.020;  // 1/f = 20 ms (uniform width)
    const double x_itl = o.itl.quantile(q);
    const double se_itl = std::sqrt(q * (1 - q) / inj_itl.size()) / (std::exp(-x_itl / 0.004) / 0.004);
    a.near("(B) TTFT" + P + " vs distribution", rep_ttft[i], o.ttft.quantile(q),
           4 * se_ttft + tol_e2e(p, o.ttft.quantile(q)));
    a.near("(B) ITL" + P + " vs distribution", rep_itl[i], x_itl, 4 * se_itl + tol_e2e(p, x_itl));
  }
  const Summary ex = summarize(excess);
  if (!(ex.p50 < 0.001)) a.fails.push_back(strfmt("(A) median TTFT excess over the actual send %.3f ms >= 1 ms", ex.p50 * 1e3));
  a.near("(B) TTFT mean", sum.ttft.mean, 0.030, 0.002 + 0.002);
  a.near("(B) ITL mean", sum.itl.mean, 0.004, 0.0004 + 0.002);
  a.near("(B) TPOT mean", sum.tpot.mean, 0.004, 0.0006 + 0.002);  // TPOT of a request = mean of its gaps
  return a;
}
}  // namespace

TEST(Accuracy, ReportedPercentilesMatchInjectedDelays) {
  std::string log;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    Attempt a = accuracy_attempt();
    if (kSanitized) {
      std::printf("sanitizer build: exact accounting checked; timing tolerances not asserted (%zu deviations)\n",
                  a.fails.size());
      return;
    }
    if (a.fails.empty()) {
      if (attempt > 1) std::printf("accuracy passed on attempt %d after:\n%s", attempt, log.c_str());
      return;
    }
    log += strfmt("attempt %d:\n", attempt);
    for (const auto& f : a.fails) log += "  " + f + "\n";
  }
  ADD_FAILURE() << "reported latencies deviate from the injected delays in all 3 attempts:\n" << log;
}

TEST(Load, ChatStreamsCountContentNotRoleChunks) {
  FakeServerOptions o;
  Rig rig(o, /*chat=*/true);
  Workload w = synthetic(8, 5);
  LoadSpec spec;
  spec.concurrency = 2;
  spec.num_requests = 10;
  auto res = run_phase(rig.target, w, spec);
  ASSERT_TRUE(res) << res.message();
  for (const auto& r : res->records) {
    EXPECT_TRUE(r.ok()) << r.error_message;
    EXPECT_EQ(r.content_events, 5);
    EXPECT_EQ(r.usage_completion_tokens, 5);
    EXPECT_EQ(r.usage_prompt_tokens, 8);
  }
}

TEST(Load, InjectedServerErrorsAreCountedByKind) {
  FakeServerOptions o;
  o.error_rate = 0.3;
  o.seed = 5;
  Rig rig(o);
  Workload w = synthetic(4, 3);
  LoadSpec spec;
  spec.concurrency = 4;
  spec.num_requests = 100;
  auto res = run_phase(rig.target, w, spec);
  ASSERT_TRUE(res) << res.message();
  int injected_failures = 0;
  for (const auto& r : rig.server->injected()) injected_failures += r.failed;
  ASSERT_GT(injected_failures, 10);
  const RunSummary sum = summarize_run(*res, spec, SloSpec{});
  EXPECT_EQ(sum.failed, injected_failures);
  EXPECT_EQ(sum.errors.at("http_status"), injected_failures);
  for (const auto& r : res->records)
    if (!r.ok()) {
      EXPECT_EQ(r.http_status, 500);
      EXPECT_NE(r.error_message.find("injected failure"), std::string::npos) << r.error_message;
    }
}

TEST(Load, ConnectionRefusedAndTimeout) {
  // A port with nothing listening: take an ephemeral port from a server, then stop it.
  int dead_port;
  {
    auto s = FakeServer::start({});
    ASSERT_TRUE(s);
    dead_port = (*s)->port();
  }
  Target t;
  t.port = dead_port;
  Workload w = synthetic(4, 2);
  LoadSpec spec;
  spec.concurrency = 2;
  spec.num_requests = 4;
  auto res = run_phase(t, w, spec);
  ASSERT_TRUE(res) << res.message();
  for (const auto& r : res->records) {
    EXPECT_EQ(r.error, ErrorKind::kConnect);
    EXPECT_NE(r.error_message.find("refused"), std::string::npos) << r.error_message;
  }

  FakeServerOptions slow;
  slow.ttft = Distribution::fixed(5.0);
  Rig rig(slow);
  rig.target.timeout_s = 0.2;
  auto res2 = run_phase(rig.target, w, spec);
  ASSERT_TRUE(res2);
  for (const auto& r : res2->records) EXPECT_EQ(r.error, ErrorKind::kTimeout) << r.error_message;
}

TEST(Load, PoissonAndGammaArrivals) {
  FakeServerOptions o;
  Rig rig(o);
  for (double k : {1.0, 0.25}) {
    Workload w = synthetic(2, 1);
    LoadSpec spec;
    spec.mode = LoadSpec::Mode::kRate;
    spec.rate = 400;
    spec.burstiness = k;
    spec.num_requests = 400;
    spec.seed = 9;
    auto res = run_phase(rig.target, w, spec);
    ASSERT_TRUE(res) << res.message();
    ASSERT_EQ(res->records.size(), 400u);
    std::vector<double> gaps;
    for (size_t i = 1; i < res->records.size(); ++i)
      gaps.push_back(res->records[i].scheduled_s - res->records[i - 1].scheduled_s);
    double mean = 0, var = 0;
    for (double g : gaps) mean += g;
    mean /= gaps.size();
    for (double g : gaps) var += (g - mean) * (g - mean);
    var /= gaps.size() - 1;
    // Gamma(k, 1/(rate k)): mean 1/rate, coefficient of variation 1/sqrt(k).
    EXPECT_NEAR(mean, 1.0 / 400, 0.15 / 400) << "k=" << k;
    EXPECT_NEAR(std::sqrt(var) / mean, 1 / std::sqrt(k), 0.25 / std::sqrt(k)) << "k=" << k;
    for (const auto& r : res->records) {
      EXPECT_TRUE(r.ok());
      EXPECT_GE(r.start_s, r.scheduled_s - 1e-6);  // never early
    }
  }
}

TEST(Load, MaxConcurrencyCapsRequestsInFlight) {
  FakeServerOptions o;
  o.ttft = Distribution::fixed(0.02);
  Rig rig(o);
  Workload w = synthetic(2, 2);
  LoadSpec spec;
  spec.mode = LoadSpec::Mode::kRate;
  spec.rate = INFINITY;
  spec.max_concurrency = 4;
  spec.num_requests = 20;
  auto res = run_phase(rig.target, w, spec);
  ASSERT_TRUE(res) << res.message();
  // Sweep over start/end events: never more than 4 overlapping.
  std::vector<std::pair<double, int>> ev;
  for (const auto& r : res->records) {
    ASSERT_TRUE(r.ok());
    ev.push_back({r.start_s, +1});
    ev.push_back({r.start_s + r.e2e_s, -1});
  }
  std::sort(ev.begin(), ev.end());
  int cur = 0, peak = 0;
  for (auto& [t, d] : ev) peak = std::max(peak, cur += d);
  EXPECT_EQ(peak, 4);
  // 20 requests, 4 at a time, >= 20 ms each: at least 5 rounds.
  EXPECT_GE(res->wall_s, 0.1);
}

TEST(Load, DurationBoundRun) {
  FakeServerOptions o;
  o.itl = Distribution::fixed(0.001);
  Rig rig(o);
  Workload w = synthetic(2, 4);
  LoadSpec spec;
  spec.concurrency = 3;
  spec.duration_s = 0.3;
  auto res = run_phase(rig.target, w, spec);
  ASSERT_TRUE(res) << res.message();
  EXPECT_GT(res->records.size(), 20u);
  for (const auto& r : res->records) {
    EXPECT_TRUE(r.ok());
    EXPECT_LT(r.start_s, 0.3 + 1e-3);
  }
}

TEST(Load, BadSpecsAreErrors) {
  Target t;
  Workload w = synthetic(1, 1);
  LoadSpec spec;  // neither count nor duration
  auto r = run_phase(t, w, spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("--num-requests or --duration"), std::string::npos);
  spec.num_requests = 1;
  spec.mode = LoadSpec::Mode::kRate;
  spec.rate = 0;
  EXPECT_FALSE(run_phase(t, w, spec));
}

}  // namespace
}  // namespace mopt::loadgen
