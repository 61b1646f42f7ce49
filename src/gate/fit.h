// Least-squares line through (t, y) samples with the uncertainty of its slope: what the leak gate fits to memory
// samples of a soak. With n points, residual variance s^2 = SSR / (n - 2), the slope's standard error is
// sqrt(s^2 / Sxx), and its one-sided upper confidence bound at level c is slope + t_{c, n-2} * SE (Student's t).
#pragma once

#include <vector>

namespace mopt::gate {

struct LineFit {
  int n = 0;
  double slope = 0, intercept = 0;  // y = intercept + slope * t
  double slope_se = 0;              // standard error of the slope
  double r2 = 0;                    // coefficient of determination (1 when the residuals are all 0)
  // slope + t_{confidence, n-2} * slope_se: the slope is below this with the given confidence.
  double upper(double confidence) const;
  double lower(double confidence) const;  // slope - t * SE
};

// Needs n >= 3 distinct t values for a standard error; fewer give slope_se = +inf.
LineFit fit_line(const std::vector<double>& t, const std::vector<double>& y);

// Student's t distribution with `df` degrees of freedom: CDF and quantile (inverse CDF, p in (0, 1)).
double student_t_cdf(double x, double df);
double student_t_quantile(double p, double df);

}  // namespace mopt::gate
