#include "loadgen/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace mopt::loadgen {
namespace {

TEST(Percentile, MatchesNumpyLinearMethod) {
  // numpy docs: np.percentile([[10, 7, 4], [3, 2, 1]], 50) == 3.5 (flattened).
  std::vector<double> a = {10, 7, 4, 3, 2, 1};
  std::sort(a.begin(), a.end());
  EXPECT_DOUBLE_EQ(percentile_sorted(a, 50), 3.5);
  // R: quantile(1:10, c(.1, .9), type = 7) == 1.9, 9.1
  std::vector<double> b;
  for (int i = 1; i <= 10; ++i) b.push_back(i);
  EXPECT_NEAR(percentile_sorted(b, 10), 1.9, 1e-12);
  EXPECT_NEAR(percentile_sorted(b, 90), 9.1, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted(b, 0), 1);
  EXPECT_DOUBLE_EQ(percentile_sorted(b, 100), 10);
  // Hand-computed: [1,2,3,4,10]: h = 4p/100.
  std::vector<double> c = {1, 2, 3, 4, 10};
  EXPECT_DOUBLE_EQ(percentile_sorted(c, 50), 3);
  EXPECT_NEAR(percentile_sorted(c, 90), 7.6, 1e-12);
  EXPECT_NEAR(percentile_sorted(c, 99), 9.76, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted({42}, 99.9), 42);
}

TEST(Summary, MeanStddevAndPercentiles) {
  Summary s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_NEAR(s.stddev, std::sqrt(2.5), 1e-12);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_NEAR(s.p999, 4.996, 1e-12);
  EXPECT_EQ(summarize({}).n, 0u);
}

TEST(Bytes, ParsesBinaryAndDecimalUnits) {
  EXPECT_DOUBLE_EQ(*parse_bytes("512MiB"), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_bytes("2G"), 2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_bytes("1.5GiB"), 1.5 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_bytes("100MB"), 1e8);
  EXPECT_DOUBLE_EQ(*parse_bytes("4096"), 4096);
  EXPECT_DOUBLE_EQ(*parse_bytes("4096B"), 4096);
  for (const char* bad : {"", "lots", "5 GiB", "5TB", "-1G", "G"}) EXPECT_FALSE(parse_bytes(bad)) << bad;
}

TEST(Duration, ParsesUnits) {
  EXPECT_DOUBLE_EQ(*parse_duration("500ms", 1), 0.5);
  EXPECT_DOUBLE_EQ(*parse_duration("2s", 1), 2);
  EXPECT_DOUBLE_EQ(*parse_duration("1.5m", 1), 90);
  EXPECT_DOUBLE_EQ(*parse_duration("250us", 1), 250e-6);
  EXPECT_DOUBLE_EQ(*parse_duration("30", 1), 30);
  EXPECT_DOUBLE_EQ(*parse_duration("30", 1e-3), 0.03);
  EXPECT_FALSE(parse_duration("5 parsecs", 1));
  EXPECT_FALSE(parse_duration("", 1));
  EXPECT_FALSE(parse_duration("-1s", 1));
  auto bad = parse_duration("3x", 1);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("unknown unit"), std::string::npos);
}

TEST(Distribution, ParseAndQuantiles) {
  auto u = Distribution::parse("uniform:2ms,8ms", true);
  ASSERT_TRUE(u) << u.message();
  EXPECT_NEAR(u->quantile(0.5), 0.005, 1e-12);
  EXPECT_NEAR(u->quantile(0.9), 0.0074, 1e-12);
  auto e = Distribution::parse("exp:10ms", true);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->quantile(0.5), 0.010 * std::log(2.0), 1e-12);
  auto n = Distribution::parse("normal:100,10", false);
  ASSERT_TRUE(n);
  EXPECT_NEAR(n->quantile(0.975), 100 + 10 * 1.959963984540054, 1e-6);  // z_0.975
  EXPECT_NEAR(n->quantile(0.5), 100, 1e-9);
  auto f = Distribution::parse("128", false);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, Distribution::Kind::kFixed);
  EXPECT_DOUBLE_EQ(f->a, 128);
  EXPECT_FALSE(Distribution::parse("uniform:8ms,2ms", true));
  EXPECT_FALSE(Distribution::parse("zipf:1", false));
  EXPECT_FALSE(Distribution::parse("uniform:1", false));
  EXPECT_FALSE(Distribution::parse("exp:-3", false));
}

// Sampling agrees with the analytic quantiles (Kolmogorov-Smirnov style bound on the empirical CDF).
TEST(Distribution, SamplesMatchQuantiles) {
  Rng rng(7);
  for (const char* spec : {"uniform:10,20", "exp:5", "normal:50,5"}) {
    auto d = Distribution::parse(spec, false);
    ASSERT_TRUE(d);
    std::vector<double> xs(20000);
    for (auto& x : xs) x = d->sample(rng);
    std::sort(xs.begin(), xs.end());
    for (double q : {0.1, 0.5, 0.9}) {
      const double v = d->quantile(q);
      const double frac = static_cast<double>(std::lower_bound(xs.begin(), xs.end(), v) - xs.begin()) / xs.size();
      EXPECT_NEAR(frac, q, 0.015) << spec << " q=" << q;
    }
  }
}

TEST(Rng, GammaMeanAndVariance) {
  Rng rng(3);
  for (double k : {0.5, 1.0, 4.0}) {
    double sum = 0, sum2 = 0;
    const int n = 50000;
    for (int i = 0; i < n; ++i) {
      const double x = rng.gamma(k);
      sum += x;
      sum2 += x * x;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, k, 0.03 * k + 0.01) << "shape " << k;
    EXPECT_NEAR(var, k, 0.08 * k + 0.02) << "shape " << k;  // Gamma(k, 1): variance k
  }
}

TEST(Rng, DeterministicForSeed) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

}  // namespace
}  // namespace mopt::loadgen
