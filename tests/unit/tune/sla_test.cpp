#include "tune/sla.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/stats.h"

namespace mopt::tune {
namespace {

using loadgen::RequestRecord;

RequestRecord request(double ttft, double e2e, int tokens, bool ok = true) {
  RequestRecord r;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.content_events = tokens;
  r.usage_completion_tokens = tokens;
  if (!ok) r.error = loadgen::ErrorKind::kHttpStatus;
  return r;
}

TEST(Sla, ParsesBoundsAndRefusesAmbiguousOnes) {
  auto s = Sla::parse("ttft_p99=500ms,tpot_p99=50ms,error_rate=0");
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(s->bounds().size(), 3u);
  EXPECT_EQ(s->bounds()[0].metric, SlaBound::Metric::kTtft);
  EXPECT_DOUBLE_EQ(s->bounds()[0].percentile, 99);
  EXPECT_DOUBLE_EQ(s->bounds()[0].limit, 0.5);
  EXPECT_DOUBLE_EQ(s->bounds()[1].limit, 0.05);
  EXPECT_EQ(s->bounds()[2].metric, SlaBound::Metric::kErrorRate);
  EXPECT_EQ(s->to_string(), "ttft_p99=500ms,tpot_p99=50ms,error_rate=0");
  auto pct = Sla::parse("e2e_p999=2s,itl_mean=20,error_rate=1%");
  ASSERT_TRUE(pct) << pct.message();
  EXPECT_DOUBLE_EQ(pct->bounds()[0].percentile, 99.9);
  EXPECT_DOUBLE_EQ(pct->bounds()[1].percentile, -1);
  EXPECT_DOUBLE_EQ(pct->bounds()[1].limit, 0.02);  // a bare number is milliseconds
  EXPECT_DOUBLE_EQ(pct->bounds()[2].limit, 0.01);
  for (const char* bad : {"ttft=500ms", "ttft_p97=1s", "latency_p99=1s", "error_rate=2", "ttft_p99=-1ms",
                          "ttft_p99", "", "ttft_p99=1s,ttft_p99=2s"}) {
    auto r = Sla::parse(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) EXPECT_FALSE(r.message().empty());
  }
  EXPECT_NE(Sla::parse("ttft=500ms").message().find("ttft_p99"), std::string::npos) << "says how to write it";
}

TEST(Sla, PerRequestLimitsTakeTheHighestPercentile) {
  auto s = Sla::parse("ttft_p50=100ms,ttft_p99=500ms,tpot_mean=30ms,e2e_p90=3s,error_rate=0");
  ASSERT_TRUE(s);
  const loadgen::SloSpec slo = s->per_request();
  EXPECT_DOUBLE_EQ(slo.ttft_s, 0.5);
  EXPECT_LT(slo.tpot_s, 0) << "a mean bounds no single request";
  EXPECT_DOUBLE_EQ(slo.e2e_s, 3.0);
}

TEST(Sla, ChecksASummary) {
  auto s = Sla::parse("ttft_p99=500ms,error_rate=0.1");
  ASSERT_TRUE(s);
  loadgen::RunSummary sum;
  sum.completed = 10;
  sum.failed = 1;
  sum.ttft.n = 9;
  sum.ttft.p99 = 0.4;
  auto checks = s->check(sum);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_TRUE(checks[0].met);
  EXPECT_DOUBLE_EQ(checks[1].value, 0.1);
  EXPECT_TRUE(checks[1].met);
  EXPECT_TRUE(s->met(sum));
  EXPECT_NEAR(s->excess(sum), 0.8, 1e-12);  // 400 / 500
  sum.ttft.p99 = 0.75;
  EXPECT_FALSE(s->met(sum));
  EXPECT_NEAR(s->excess(sum), 1.5, 1e-12);
  sum.ttft.n = 0;  // nothing succeeded: no latency bound is met
  EXPECT_FALSE(s->check(sum)[0].met);
}

// The hopeless rule against the percentile itself: stopping must never happen while the final P99 could still
// meet the limit, and must happen once it cannot. The worst case for "could still meet": the requests over the
// limit are barely over it (limit + 1 us) and the others take no time.
TEST(EarlyStop, StopsExactlyWhenThePercentileIsLost) {
  auto s = Sla::parse("ttft_p99=100ms");
  ASSERT_TRUE(s);
  const double over = 0.1 + 1e-6;
  for (int64_t n : {20, 100, 200, 1000}) {
    // Over-limit requests first: find the first count at which EarlyStop stops.
    EarlyStop stop(*s, n, 0, 0);
    int64_t stopped_at = -1;
    for (int64_t i = 0; i < n && stopped_at < 0; ++i)
      if (stop.on_record(request(over, 0.3, 4))) stopped_at = i + 1;
    ASSERT_GT(stopped_at, 0) << n;
    // With stopped_at - 1 slow requests and the rest instant, the P99 still meets the limit...
    auto p99_with = [&](int64_t slow) {
      std::vector<double> v;
      for (int64_t i = 0; i < n; ++i) v.push_back(i < slow ? over : 0.0);
      std::sort(v.begin(), v.end());
      return loadgen::percentile_sorted(v, 99);
    };
    EXPECT_LE(p99_with(stopped_at - 1), 0.1) << n;
    // ... and with stopped_at of them it cannot, whatever the others do.
    EXPECT_GT(p99_with(stopped_at), 0.1) << n;
  }
}

TEST(EarlyStop, ErrorsAndClearlyWorseCandidates) {
  auto s = Sla::parse("ttft_p99=1s,error_rate=0");
  ASSERT_TRUE(s);
  EarlyStop first_error(*s, 100, 0, 0);
  EXPECT_FALSE(first_error.on_record(request(0.01, 0.1, 4)));
  EXPECT_TRUE(first_error.on_record(request(-1, 0.1, 0, false)));
  EXPECT_NE(first_error.reason().find("error_rate"), std::string::npos) << first_error.reason();

  // Requests one per 0.1 s: goodput 10/s, against a best of 30/s with ratio 0.5 -> stop after a third.
  EarlyStop worse(*s, 90, 30, 0.5);
  int stopped_at = -1;
  for (int i = 0; i < 90 && stopped_at < 0; ++i) {
    RequestRecord r = request(0.01, 0.1, 4);
    r.start_s = 0.1 * i;
    if (worse.on_record(r)) stopped_at = i + 1;
  }
  EXPECT_EQ(stopped_at, 30);
  EXPECT_NE(worse.reason().find("below 50%"), std::string::npos) << worse.reason();
  // Same pace against a best of 15/s: never stopped.
  EarlyStop fine(*s, 90, 15, 0.5);
  for (int i = 0; i < 90; ++i) {
    RequestRecord r = request(0.01, 0.1, 4);
    r.start_s = 0.1 * i;
    EXPECT_FALSE(fine.on_record(r)) << i;
  }
}

}  // namespace
}  // namespace mopt::tune
