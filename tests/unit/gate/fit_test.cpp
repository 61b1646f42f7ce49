#include "gate/fit.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mopt::gate {
namespace {

// Quantiles of Student's t from published tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
TEST(StudentT, QuantilesMatchTables) {
  struct Case {
    double p, df, t;
  };
  for (const Case& c : {Case{0.975, 1, 12.706}, Case{0.975, 10, 2.228}, Case{0.95, 5, 2.015}, Case{0.995, 30, 2.750},
                        Case{0.95, 100, 1.660}, Case{0.99, 2, 6.965}, Case{0.90, 20, 1.325}})
    EXPECT_NEAR(student_t_quantile(c.p, c.df), c.t, 1e-3) << "p " << c.p << " df " << c.df;
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.228, 1e-3) << "symmetric";
  EXPECT_DOUBLE_EQ(student_t_quantile(0.5, 7), 0);
  EXPECT_NEAR(student_t_cdf(2.228, 10), 0.975, 1e-4);
  EXPECT_TRUE(std::isnan(student_t_quantile(1.0, 5)));
}

// scipy.stats.linregress([1,2,3,4,5], [2.1,3.9,6.2,7.8,10.1]): slope 1.99, intercept 0.05, stderr 0.059722,
// rvalue^2 0.997305 (worked by hand: Sxx 10, Sxy 19.9, SSR 0.107, Syy 39.708).
TEST(LineFit, MatchesAWorkedExample) {
  const LineFit f = fit_line({1, 2, 3, 4, 5}, {2.1, 3.9, 6.2, 7.8, 10.1});
  EXPECT_EQ(f.n, 5);
  EXPECT_NEAR(f.slope, 1.99, 1e-12);
  EXPECT_NEAR(f.intercept, 0.05, 1e-12);
  EXPECT_NEAR(f.slope_se, 0.0597216, 1e-6);
  EXPECT_NEAR(f.r2, 0.997305, 1e-6);
  // One-sided 95% upper bound: slope + t(0.95, 3) * SE = 1.99 + 2.3534 * 0.0597216.
  EXPECT_NEAR(f.upper(0.95), 1.99 + 2.353363 * 0.0597216, 1e-5);
  EXPECT_NEAR(f.lower(0.95), 1.99 - 2.353363 * 0.0597216, 1e-5);
}

TEST(LineFit, FlatNoisyAndDegenerateSeries) {
  const LineFit flat = fit_line({0, 1, 2, 3}, {100, 100, 100, 100});
  EXPECT_DOUBLE_EQ(flat.slope, 0);
  EXPECT_DOUBLE_EQ(flat.slope_se, 0);
  EXPECT_DOUBLE_EQ(flat.upper(0.95), 0) << "no growth, no doubt";
  // Large values with small changes: the residuals are computed directly, so the exact line has SE 0.
  const LineFit exact = fit_line({0, 1, 2, 3, 4}, {1e8, 1e8 + 4096, 1e8 + 8192, 1e8 + 12288, 1e8 + 16384});
  EXPECT_NEAR(exact.slope, 4096, 1e-6);
  EXPECT_NEAR(exact.slope_se, 0, 1e-6);
  const LineFit two = fit_line({0, 1}, {1, 2});
  EXPECT_TRUE(std::isinf(two.slope_se));
  EXPECT_TRUE(std::isinf(two.upper(0.95))) << "two points cannot bound a slope";
  EXPECT_EQ(fit_line({}, {}).n, 0);
  EXPECT_TRUE(std::isinf(fit_line({3, 3, 3}, {1, 2, 3}).slope_se)) << "no spread in t";
}

}  // namespace
}  // namespace mopt::gate
