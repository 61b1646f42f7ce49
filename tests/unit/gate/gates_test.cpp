#include "gate/gates.h"

#include <gtest/gtest.h>

#include "gate/thresholds.h"

namespace mopt::gate {
namespace {

// A soak whose anonymous RSS follows base + slope * t (MB/h) plus a deterministic wiggle, sampled every second;
// the whole RSS adds mapped-file pages growing by 100 MB/h, which are no leak.
SoakResult soak_with_growth(double mb_per_hour, int seconds, double wiggle_mb = 0.004) {
  SoakResult s;
  for (int i = 0; i <= seconds; ++i) {
    MemorySample m;
    m.t_s = i;
    m.anon_bytes = 1e6 * (100 + mb_per_hour * i / 3600.0 + (i % 2 ? wiggle_mb : -wiggle_mb));
    m.rss_bytes = m.anon_bytes + 1e6 * (500 + 100 * i / 3600.0);
    s.samples.push_back(m);
  }
  return s;
}

TEST(LeakGate, PassesAFlatSeriesAndFailsAGrowingOne) {
  Thresholds t;
  t.leak_mb_per_hour = 50;
  const GateResult flat = leak_gate(soak_with_growth(0, 120), t);
  EXPECT_EQ(flat.verdict, Verdict::kPass) << flat.measured;
  const GateResult leak = leak_gate(soak_with_growth(500, 120), t);
  EXPECT_EQ(leak.verdict, Verdict::kFail) << leak.measured;
  EXPECT_NEAR(leak.data["rss"]["slope_mb_per_hour"].get<double>(), 500, 5);
  // Growth just under the threshold, but too noisy to bound below it: not a pass.
  const GateResult noisy = leak_gate(soak_with_growth(40, 20, 0.2), t);
  EXPECT_EQ(noisy.verdict, Verdict::kFail) << noisy.measured;
  EXPECT_GT(noisy.data["rss"]["upper_bound_mb_per_hour"].get<double>(), 50);
}

TEST(LeakGate, SettlingSamplesAreLeftOutAndDeviceMemoryCounts) {
  Thresholds t;
  t.leak_mb_per_hour = 1;
  // A step during the first 20% (allocators warming up), flat afterwards.
  SoakResult s = soak_with_growth(0, 100, 0);
  for (auto& m : s.samples)
    if (m.t_s < 10) m.anon_bytes -= 5e6;
  EXPECT_EQ(leak_gate(s, t).verdict, Verdict::kPass);
  t.leak_settle = 0;
  EXPECT_EQ(leak_gate(s, t).verdict, Verdict::kFail) << "without settling the step reads as growth";
  t.leak_settle = 0.2;
  // GPU memory reported by the server, growing: fails even with a flat RSS.
  for (auto& m : s.samples) m.device_bytes = 2e9 + m.t_s * 1e4;
  const GateResult g = leak_gate(s, t);
  EXPECT_EQ(g.verdict, Verdict::kFail);
  EXPECT_TRUE(g.data.contains("device"));
  EXPECT_NE(g.measured.find("GPU memory"), std::string::npos);
  EXPECT_EQ(leak_gate(SoakResult{}, t).verdict, Verdict::kError) << "no samples: cannot be measured";
}

SoakResult soak_with_requests(int n, double slow_s, int n_slow, int n_failed) {
  SoakResult s;
  std::vector<double> e2e;
  for (int i = 0; i < n; ++i) e2e.push_back(i < n_slow ? slow_s : 0.05);
  s.run.summary.e2e = loadgen::summarize(e2e);
  s.run.summary.completed = n + n_failed;
  s.run.summary.failed = n_failed;
  if (n_failed) s.run.summary.errors["http_status"] = n_failed;
  return s;
}

TEST(TailAndErrorGates, ThresholdsDecide) {
  Thresholds t;  // P99.9 < 3 s, no errors
  EXPECT_EQ(tail_gate(soak_with_requests(2000, 4.0, 1, 0), t).verdict, Verdict::kPass) << "1 in 2000 is under P99.9";
  EXPECT_EQ(tail_gate(soak_with_requests(2000, 4.0, 10, 0), t).verdict, Verdict::kFail);
  EXPECT_EQ(tail_gate(soak_with_requests(0, 0, 0, 5), t).verdict, Verdict::kError);
  EXPECT_EQ(error_gate(soak_with_requests(100, 0, 0, 0), t).verdict, Verdict::kPass);
  const GateResult e = error_gate(soak_with_requests(99, 0, 0, 1), t);
  EXPECT_EQ(e.verdict, Verdict::kFail);
  EXPECT_NE(e.detail.find("http_status: 1"), std::string::npos) << e.detail;
  t.error_rate = 0.02;
  EXPECT_EQ(error_gate(soak_with_requests(99, 0, 0, 1), t).verdict, Verdict::kPass);
}

TEST(CudaGraphGate, SkipsOnTheCpuAndReadsTheServersMetrics) {
  SoakResult s;
  const GateResult cpu = cuda_graph_gate(s, false);
  EXPECT_EQ(cpu.verdict, Verdict::kSkip);
  EXPECT_NE(cpu.detail.find("not applicable"), std::string::npos);
  EXPECT_EQ(cuda_graph_gate(s, true).verdict, Verdict::kError) << "no /metrics";
  auto with = [](const char* text) {
    SoakResult r;
    r.final_metrics = *loadgen::parse_prometheus(text);
    r.metrics_ok = true;
    return r;
  };
  EXPECT_EQ(cuda_graph_gate(with("mopt:cuda_graphs_enabled 1\nmopt:cuda_graphs_captured 12\n"
                                 "mopt:cuda_graph_launches_total 5000\n"), true).verdict, Verdict::kPass);
  EXPECT_EQ(cuda_graph_gate(with("mopt:cuda_graphs_enabled 0\nmopt:cuda_graphs_captured 0\n"
                                 "mopt:cuda_graph_launches_total 0\n"), true).verdict, Verdict::kFail);
  EXPECT_EQ(cuda_graph_gate(with("mopt:cuda_graphs_enabled 1\nmopt:cuda_graphs_captured 3\n"
                                 "mopt:cuda_graph_launches_total 0\n"), true).verdict, Verdict::kFail);
  EXPECT_EQ(cuda_graph_gate(with("mopt:num_requests_running 0\n"), true).verdict, Verdict::kError);
}

TEST(RestartGate, TheSlowestStartDecides) {
  Thresholds t;
  t.restart_s = 10;
  EXPECT_EQ(restart_gate({{2.0, 3.0, 9.5}, {1, 1, 1}}, t).verdict, Verdict::kPass);
  EXPECT_EQ(restart_gate({{2.0, 12.0, 3.0}, {1, 1, 1}}, t).verdict, Verdict::kFail);
  EXPECT_EQ(restart_gate({}, t).verdict, Verdict::kError);
}

TEST(Thresholds, KeysOverrideAndBadOnesAreNamed) {
  Thresholds t;
  ASSERT_TRUE(set_threshold(t, "tail_p999", "500ms"));
  EXPECT_DOUBLE_EQ(t.tail_p999_s, 0.5);
  ASSERT_TRUE(set_threshold(t, "leak_mb_per_hour", "2.5"));
  EXPECT_DOUBLE_EQ(t.leak_mb_per_hour, 2.5);
  ASSERT_TRUE(set_threshold(t, "restarts", "5"));
  EXPECT_EQ(t.restarts, 5);
  ASSERT_TRUE(set_threshold(t, "accuracy", "top1>=0.999"));
  EXPECT_EQ(t.accuracy, "top1>=0.999");
  const Status unknown = set_threshold(t, "latency", "1s");
  EXPECT_FALSE(unknown);
  EXPECT_NE(unknown.message().find("tail_p999"), std::string::npos) << "lists the keys";
  EXPECT_FALSE(set_threshold(t, "error_rate", "2"));
  EXPECT_FALSE(set_threshold(t, "restarts", "2.5"));
  EXPECT_FALSE(set_threshold(t, "restart", "soon"));
}

}  // namespace
}  // namespace mopt::gate
