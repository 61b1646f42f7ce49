#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <numbers>

namespace mopt::loadgen {

double percentile_sorted(const std::vector<double>& sorted, double p) {
  MOPT_CHECK(!sorted.empty(), "percentile of an empty sample");
  MOPT_CHECK(p >= 0 && p <= 100, "percentile %g out of [0,100]", p);
  const double h = (static_cast<double>(sorted.size()) - 1.0) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  const double frac = h - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(s.n);
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = s.n > 1 ? std::sqrt(ss / static_cast<double>(s.n - 1)) : 0;
  s.min = v.front();
  s.max = v.back();
  s.p50 = percentile_sorted(v, 50);
  s.p90 = percentile_sorted(v, 90);
  s.p95 = percentile_sorted(v, 95);
  s.p99 = percentile_sorted(v, 99);
  s.p999 = percentile_sorted(v, 99.9);
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Rng

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = uniform01();
  while (u1 <= 0) u1 = uniform01();
  const double u2 = uniform01();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2 * std::numbers::pi * u2);
  has_spare_ = true;
  return r * std::cos(2 * std::numbers::pi * u2);
}

double Rng::gamma(double shape) {
  MOPT_CHECK(shape > 0, "gamma shape %g", shape);
  if (shape < 1) {
    // Gamma(a) = Gamma(a+1) * U^(1/a).
    double u = uniform01();
    while (u <= 0) u = uniform01();
    return gamma(shape + 1) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = uniform01();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing

Result<double> parse_number(std::string_view s) {
  std::string str(s);
  if (str.empty()) return error("empty number");
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || errno == ERANGE || !std::isfinite(v))
    return error("'%s' is not a valid number", str.c_str());
  return v;
}

Result<double> parse_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string_view unit = s.substr(i);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  auto num = parse_number(s.substr(0, i));
  if (!num || mult == 0 || !(*num >= 0))
    return error("'%s' is not a size (e.g. 512MiB, 2GiB, 100MB, 4096)", std::string(s).c_str());
  return *num * mult;
}

Result<double> parse_duration(std::string_view s, double bare_unit_s) {
  std::string str(s);
  size_t i = 0;
  while (i < str.size() && (std::isdigit(static_cast<unsigned char>(str[i])) || str[i] == '.' || str[i] == '-' ||
                            str[i] == '+' || str[i] == 'e' || str[i] == 'E')) {
    // 'e' only as an exponent (followed by a digit or sign), so "1e3ms" works but units never start with e.
    if ((str[i] == 'e' || str[i] == 'E') &&
        !(i + 1 < str.size() && (std::isdigit(static_cast<unsigned char>(str[i + 1])) || str[i + 1] == '-')))
      break;
    ++i;
  }
  const std::string num = str.substr(0, i), unit = str.substr(i);
  auto v = parse_number(num);
  if (!v) return error("invalid duration '%s': expected a number with a unit such as 500ms, 2s, 1m", str.c_str());
  double scale;
  if (unit.empty()) scale = bare_unit_s;
  else if (unit == "us") scale = 1e-6;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "s") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60;
  else if (unit == "h") scale = 3600;
  else return error("invalid duration '%s': unknown unit '%s' (use us, ms, s, m or h)", str.c_str(), unit.c_str());
  if (*v < 0) return error("invalid duration '%s': must not be negative", str.c_str());
  return *v * scale;
}

Result<Distribution> Distribution::parse(std::string_view spec, bool durations) {
  const std::string s(spec);
  auto value = [&](std::string_view x) -> Result<double> {
    if (durations) return parse_duration(x, 1e-3);
    auto v = parse_number(x);
    if (!v) return v;
    if (*v < 0) return error("'%s' must not be negative", std::string(x).c_str());
    return v;
  };
  const auto colon = s.find(':');
  const std::string kind = colon == std::string::npos ? "fixed" : s.substr(0, colon);
  const std::string args = colon == std::string::npos ? s : s.substr(colon + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const auto comma = args.find(',', start);
    parts.push_back(args.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const char* usage =
      "expected fixed:V, uniform:A,B, exp:MEAN or normal:MEAN,STDDEV (e.g. uniform:2ms,8ms or normal:128,32)";
  Distribution d;
  if (kind == "fixed" || kind == "exp" || kind == "exponential") {
    if (parts.size() != 1) return error("distribution '%s': %s", s.c_str(), usage);
    auto a = value(parts[0]);
    if (!a) return a.status().with_context("distribution '" + s + "'");
    d.kind = kind == "fixed" ? Kind::kFixed : Kind::kExponential;
    d.a = *a;
  } else if (kind == "uniform" || kind == "normal") {
    if (parts.size() != 2) return error("distribution '%s': %s", s.c_str(), usage);
    auto a = value(parts[0]);
    if (!a) return a.status().with_context("distribution '" + s + "'");
    auto b = value(parts[1]);
    if (!b) return b.status().with_context("distribution '" + s + "'");
    d.kind = kind == "uniform" ? Kind::kUniform : Kind::kNormal;
    d.a = *a;
    d.b = *b;
    if (d.kind == Kind::kUniform && d.b < d.a)
      return error("distribution '%s': uniform upper bound is below the lower bound", s.c_str());
  } else {
    return error("distribution '%s': unknown kind '%s'; %s", s.c_str(), kind.c_str(), usage);
  }
  return d;
}

double Distribution::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed: return a;
    case Kind::kUniform: return a + (b - a) * rng.uniform01();
    case Kind::kExponential: return -a * std::log1p(-rng.uniform01());
    case Kind::kNormal: return std::max(0.0, a + b * rng.normal());
  }
  return a;
}

namespace {
// Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9 after refinement).
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double plow = 0.02425;
  double x;
  if (p < plow) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - plow) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  // One Halley refinement step.
  const double e = 0.5 * std::erfc(-x / std::numbers::sqrt2) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}
}  // namespace

double Distribution::quantile(double q) const {
  MOPT_CHECK(q > 0 && q < 1, "quantile %g", q);
  switch (kind) {
    case Kind::kFixed: return a;
    case Kind::kUniform: return a + (b - a) * q;
    case Kind::kExponential: return -a * std::log1p(-q);
    case Kind::kNormal: return a + b * normal_quantile(q);
  }
  return a;
}

double Distribution::mean() const {
  switch (kind) {
    case Kind::kFixed: return a;
    case Kind::kUniform: return (a + b) / 2;
    case Kind::kExponential: return a;
    case Kind::kNormal: return a;
  }
  return a;
}

std::string Distribution::to_string(bool durations) const {
  auto v = [&](double x) { return durations ? strfmt("%gms", x * 1e3) : strfmt("%g", x); };
  switch (kind) {
    case Kind::kFixed: return v(a);
    case Kind::kUniform: return "uniform:" + v(a) + "," + v(b);
    case Kind::kExponential: return "exp:" + v(a);
    case Kind::kNormal: return "normal:" + v(a) + "," + v(b);
  }
  return "?";
}

}  // namespace mopt::loadgen
