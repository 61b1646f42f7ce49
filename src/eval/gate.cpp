#include "eval/gate.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/strfmt.h"

namespace mopt::eval {
namespace {

// One row a metric, in the order errors list them: the metric, its name in a gate, the EvalMetrics field it reads.
struct MetricRow {
  GateMetric metric;
  const char* name;
  double EvalMetrics::*value;
};
constexpr MetricRow kMetrics[] = {
    {GateMetric::kTop1, "top1", &EvalMetrics::top1},
    {GateMetric::kTopk, "topk", &EvalMetrics::topk},
    {GateMetric::kKl, "kl", &EvalMetrics::kl_mean},
    {GateMetric::kKlP99, "kl_p99", &EvalMetrics::kl_p99},
    {GateMetric::kKlMax, "kl_max", &EvalMetrics::kl_max},
    {GateMetric::kPpl, "ppl", &EvalMetrics::ppl},
    {GateMetric::kPplDelta, "ppl_delta", &EvalMetrics::ppl_delta},
    {GateMetric::kPplRatio, "ppl_ratio", &EvalMetrics::ppl_ratio},
};

const MetricRow* find_metric(GateMetric m) {
  for (const MetricRow& r : kMetrics)
    if (r.metric == m) return &r;
  return nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string metric_list() {
  std::string out;
  for (const MetricRow& r : kMetrics) out += std::string(out.empty() ? "" : ", ") + r.name;
  return out;
}

}  // namespace

const char* gate_metric_name(GateMetric m) {
  const MetricRow* r = find_metric(m);
  return r ? r->name : "?";
}

bool gate_needs_reference(GateMetric m) { return m != GateMetric::kPpl; }

double gate_metric_value(const EvalMetrics& m, GateMetric metric) {
  const MetricRow* r = find_metric(metric);
  return r ? m.*(r->value) : NAN;
}

Result<std::vector<GateCheck>> parse_gate(std::string_view spec) {
  std::vector<GateCheck> out;
  if (trim(spec).empty()) return error("--gate is empty: give comparisons like top1>=0.995,kl<=0.01");
  size_t start = 0;
  for (;;) {
    const size_t comma = spec.find(',', start);
    const std::string_view item = trim(spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start));
    auto bad = [&](const std::string& why) {
      return error("--gate item '%.*s' %s; write METRIC OP NUMBER items separated by commas, e.g. "
                   "top1>=0.995,kl<=0.01 (metrics: %s; OP: >=, <=, >, <)",
                   static_cast<int>(item.size()), item.data(), why.c_str(), metric_list().c_str());
    };
    if (item.empty()) return error("--gate '%.*s' has an empty item (two commas, or a comma at an end)",
                                   static_cast<int>(spec.size()), spec.data());
    const size_t op_at = item.find_first_of("<>=!");
    if (op_at == std::string_view::npos) return bad("has no comparison");
    const std::string_view name = trim(item.substr(0, op_at));
    GateCheck c;
    c.text = std::string(item);
    bool known = false;
    for (const MetricRow& r : kMetrics)
      if (name == r.name) {
        c.metric = r.metric;
        known = true;
      }
    if (!known) return bad(name.empty() ? "names no metric" : "names an unknown metric");
    std::string_view rest = item.substr(op_at);
    if (rest.starts_with(">=")) {
      c.op = GateOp::kGe;
      rest.remove_prefix(2);
    } else if (rest.starts_with("<=")) {
      c.op = GateOp::kLe;
      rest.remove_prefix(2);
    } else if (rest.starts_with(">")) {
      c.op = GateOp::kGt;
      rest.remove_prefix(1);
    } else if (rest.starts_with("<")) {
      c.op = GateOp::kLt;
      rest.remove_prefix(1);
    } else {
      return bad("has an unknown comparison");
    }
    const std::string num(trim(rest));
    if (num.empty()) return bad("has no number");
    errno = 0;
    char* end = nullptr;
    c.threshold = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || errno == ERANGE || !std::isfinite(c.threshold))
      return bad("has a threshold that is not a finite number");
    out.push_back(std::move(c));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<std::vector<GateOutcome>> apply_gate(const std::vector<GateCheck>& checks, const EvalMetrics& m) {
  std::vector<GateOutcome> out;
  for (const GateCheck& c : checks) {
    if (gate_needs_reference(c.metric) && !m.has_ref)
      return error("--gate '%s' compares against a reference model: give --ref", c.text.c_str());
    GateOutcome o;
    o.check = c;
    o.value = gate_metric_value(m, c.metric);
    switch (c.op) {
      case GateOp::kGe: o.passed = o.value >= c.threshold; break;
      case GateOp::kLe: o.passed = o.value <= c.threshold; break;
      case GateOp::kGt: o.passed = o.value > c.threshold; break;
      case GateOp::kLt: o.passed = o.value < c.threshold; break;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace mopt::eval
