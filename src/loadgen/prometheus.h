// Prometheus text exposition format (version 0.0.4) parser, and before/after deltas of scraped metrics.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mopt::loadgen {

enum class MetricType { kUntyped, kCounter, kGauge, kHistogram, kSummary };
const char* metric_type_name(MetricType t);

struct MetricSample {
  std::string name;                           // full sample name, e.g. "mopt:ttft_seconds_bucket"
  std::map<std::string, std::string> labels;  // label name -> unescaped value
  double value = 0;
  std::string family;                         // the # TYPE family it belongs to ("" when none)
  MetricType type = MetricType::kUntyped;     // the family's type
  // Canonical key: name{a="x",b="y"} with labels sorted.
  std::string key() const;
};

struct MetricsSnapshot {
  std::vector<MetricSample> samples;
  const MetricSample* find(std::string_view key) const;
  // Sum of every sample with this name (over all label sets); `found` tells whether any existed.
  double sum(std::string_view name, bool* found = nullptr) const;
};

// Parses a whole /metrics body. Malformed lines are errors naming the line number.
Result<MetricsSnapshot> parse_prometheus(std::string_view text);

struct MetricDelta {
  std::string key;
  MetricType type = MetricType::kUntyped;
  double before = 0, after = 0;
  bool in_before = false;
};
// One entry per sample in `after` whose name starts with `prefix` ("" = all).
std::vector<MetricDelta> metric_deltas(const MetricsSnapshot& before, const MetricsSnapshot& after,
                                       std::string_view prefix);

}  // namespace mopt::loadgen
