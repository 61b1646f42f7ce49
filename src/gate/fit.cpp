#include "gate/fit.h"

#include <cmath>
#include <limits>

namespace mopt::gate {

namespace {

// Continued fraction of the regularized incomplete beta function (modified Lentz's method), valid for
// x < (a + 1) / (a + b + 2); the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) otherwise.
double beta_cf(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    d = std::fabs(d) < kTiny ? kTiny : d;
    c = 1 + num / c;
    c = std::fabs(c) < kTiny ? kTiny : c;
    d = 1 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    d = std::fabs(d) < kTiny ? kTiny : d;
    c = 1 + num / c;
    c = std::fabs(c) < kTiny ? kTiny : c;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < kEps) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double inc_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double ln_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(ln_front) * beta_cf(a, b, x) / a;
  return 1 - std::exp(ln_front) * beta_cf(b, a, 1 - x) / b;
}

}  // namespace

double student_t_cdf(double x, double df) {
  const double tail = 0.5 * inc_beta(df / 2, 0.5, df / (df + x * x));  // P(T > |x|)
  return x >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0.5) return 0;
  // Bisection on the CDF, which is monotonic; bracket the root first.
  double lo = -1, hi = 1;
  while (student_t_cdf(lo, df) > p) lo *= 2;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
    if (hi - lo < 1e-12 * std::max(1.0, std::fabs(mid))) break;
  }
  return 0.5 * (lo + hi);
}

double LineFit::upper(double confidence) const {
  if (n < 3 || !std::isfinite(slope_se)) return std::numeric_limits<double>::infinity();
  return slope + student_t_quantile(confidence, n - 2) * slope_se;
}

double LineFit::lower(double confidence) const {
  if (n < 3 || !std::isfinite(slope_se)) return -std::numeric_limits<double>::infinity();
  return slope - student_t_quantile(confidence, n - 2) * slope_se;
}

LineFit fit_line(const std::vector<double>& t, const std::vector<double>& y) {
  LineFit f;
  f.n = static_cast<int>(std::min(t.size(), y.size()));
  f.slope_se = std::numeric_limits<double>::infinity();
  if (f.n == 0) return f;
  double mt = 0, my = 0;
  for (int i = 0; i < f.n; ++i) {
    mt += t[static_cast<size_t>(i)];
    my += y[static_cast<size_t>(i)];
  }
  mt /= f.n;
  my /= f.n;
  double sxx = 0, sxy = 0, syy = 0;
  for (int i = 0; i < f.n; ++i) {
    const double dt = t[static_cast<size_t>(i)] - mt, dy = y[static_cast<size_t>(i)] - my;
    sxx += dt * dt;
    sxy += dt * dy;
    syy += dy * dy;
  }
  f.intercept = my;
  if (sxx <= 0) return f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mt;
  double ssr = 0;  // from the residuals themselves (syy - slope * sxy cancels badly for a near-perfect line)
  for (int i = 0; i < f.n; ++i) {
    const double r = y[static_cast<size_t>(i)] - (f.intercept + f.slope * t[static_cast<size_t>(i)]);
    ssr += r * r;
  }
  f.r2 = syy > 0 ? 1 - ssr / syy : 1;
  if (f.n >= 3) f.slope_se = std::sqrt(ssr / (f.n - 2) / sxx);
  return f;
}

}  // namespace mopt::gate
