// Latency statistics for mopt bench: percentiles, summaries, random distributions and duration strings.
//
// Percentile method: linear interpolation between closest ranks (Hyndman & Fan type 7, the default of numpy,
// R and Excel's PERCENTILE.INC). For sorted x[0..n-1] and p in [0,100]: h = (n-1)*p/100,
// P = x[floor(h)] + (h - floor(h)) * (x[floor(h)+1] - x[floor(h)]).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace mopt::loadgen {

// `sorted` must be ascending and non-empty; p in [0, 100].
double percentile_sorted(const std::vector<double>& sorted, double p);

struct Summary {
  size_t n = 0;
  double mean = 0, min = 0, max = 0, stddev = 0;
  double p50 = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0;
};
// Sorts a copy; an empty input gives n = 0 and zeros.
Summary summarize(std::vector<double> values);

// Small deterministic PRNG (splitmix64-seeded xoshiro256**) so results are reproducible across standard
// libraries (std::*_distribution outputs are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed = 1) : gen_(seed) {}
  uint64_t next_u64() { return gen_.next(); }
  double uniform01() { return gen_.uniform(); }  // [0, 1)
  double normal();     // standard normal (Box-Muller)
  double gamma(double shape);  // Gamma(shape, scale 1), shape > 0 (Marsaglia & Tsang)
 private:
  Xoshiro256 gen_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// A distribution of a non-negative quantity (seconds or a count), parsed from a spec:
//   "5ms" / "128" / "fixed:5ms"          constant
//   "uniform:2ms,8ms" / "uniform:64,256" uniform on [a, b]
//   "exp:5ms"                            exponential with the given mean
//   "normal:128,32"                      normal(mean, stddev), clamped at 0
struct Distribution {
  enum class Kind { kFixed, kUniform, kExponential, kNormal };
  Kind kind = Kind::kFixed;
  double a = 0, b = 0;

  static Distribution fixed(double v) { return {Kind::kFixed, v, 0}; }
  // `durations`: values carry a time unit (bare numbers are milliseconds) and are returned in seconds.
  static Result<Distribution> parse(std::string_view spec, bool durations);
  double sample(Rng& rng) const;
  // The q-quantile (q in (0,1)) of the distribution (for normal: unclamped).
  double quantile(double q) const;
  double mean() const;
  std::string to_string(bool durations) const;
};

// "500ms", "2s", "1.5m", "250us", "3h"; a bare number uses `bare_unit_s` (1.0 = seconds, 1e-3 = milliseconds).
Result<double> parse_duration(std::string_view s, double bare_unit_s);
// "512MiB", "2GiB", "1.5G" (binary: K, M, G, KiB, MiB, GiB), "100MB", "1GB" (decimal), "4096" or "4096B": bytes.
Result<double> parse_bytes(std::string_view s);
// Strict number parse (whole string).
Result<double> parse_number(std::string_view s);

}  // namespace mopt::loadgen
