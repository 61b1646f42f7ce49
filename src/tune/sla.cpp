#include "tune/sla.h"

#include <algorithm>
#include <cmath>

#include "core/strfmt.h"
#include "core/strings.h"
#include "loadgen/stats.h"

namespace mopt::tune {

using loadgen::RunSummary;
using loadgen::Summary;
using Metric = SlaBound::Metric;

namespace {

const Summary& summary_of(const RunSummary& s, Metric m) {
  switch (m) {
    case Metric::kTtft: return s.ttft;
    case Metric::kTpot: return s.tpot;
    case Metric::kItl: return s.itl;
    case Metric::kE2e: return s.e2e;
    case Metric::kErrorRate: break;
  }
  return s.e2e;  // not reached for error_rate
}

double stat_of(const Summary& s, double pct) {
  if (pct < 0) return s.mean;
  if (pct == 50) return s.p50;
  if (pct == 90) return s.p90;
  if (pct == 95) return s.p95;
  if (pct == 99) return s.p99;
  return s.p999;
}

double error_rate(const RunSummary& s) {
  return s.completed > 0 ? static_cast<double>(s.failed) / static_cast<double>(s.completed) : 0.0;
}

// The value a request contributes to a latency metric (-1: none, e.g. TPOT of a one-token answer). ITL: its
// largest gap (a request over an ITL percentile limit has at least that gap).
double request_value(const loadgen::RequestRecord& r, Metric m) {
  switch (m) {
    case Metric::kTtft: return r.ttft_s;
    case Metric::kTpot: return r.tpot_s();
    case Metric::kItl: return r.itl_s.empty() ? -1 : *std::max_element(r.itl_s.begin(), r.itl_s.end());
    case Metric::kE2e: return r.e2e_s;
    case Metric::kErrorRate: return -1;
  }
  return -1;
}

}  // namespace

Result<Sla> Sla::parse(const std::string& spec) {
  Sla sla;
  for (const std::string& item : split_nonempty(spec, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return error("--slo item '%s': expected NAME=VALUE, e.g. ttft_p99=500ms,tpot_p99=50ms,error_rate=0",
                   item.c_str());
    SlaBound b;
    b.name = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (b.name == "error_rate") {
      b.metric = Metric::kErrorRate;
      const bool pct = !value.empty() && value.back() == '%';
      auto v = loadgen::parse_number(pct ? value.substr(0, value.size() - 1) : value);
      if (!v || *v < 0 || (pct ? *v > 100 : *v > 1))
        return error("--slo error_rate=%s: expected a fraction in [0, 1] or a percentage (e.g. 0, 0.01, 1%%)",
                     value.c_str());
      b.limit = pct ? *v / 100 : *v;
    } else {
      const size_t us = b.name.find('_');
      const std::string metric = b.name.substr(0, us);
      const std::string stat = us == std::string::npos ? "" : b.name.substr(us + 1);
      if (metric == "ttft") b.metric = Metric::kTtft;
      else if (metric == "tpot") b.metric = Metric::kTpot;
      else if (metric == "itl") b.metric = Metric::kItl;
      else if (metric == "e2e") b.metric = Metric::kE2e;
      else
        return error("--slo: unknown metric '%s' (use ttft, tpot, itl or e2e with _p50, _p90, _p95, _p99, _p999 or "
                     "_mean, or error_rate)", b.name.c_str());
      if (stat == "p50") b.percentile = 50;
      else if (stat == "p90") b.percentile = 90;
      else if (stat == "p95") b.percentile = 95;
      else if (stat == "p99") b.percentile = 99;
      else if (stat == "p999") b.percentile = 99.9;
      else if (stat == "mean") b.percentile = -1;
      else
        return error("--slo %s: say which statistic is bounded: %s_p50, _p90, _p95, _p99, _p999 or _mean "
                     "(e.g. %s_p99=500ms)", b.name.c_str(), metric.c_str(), metric.c_str());
      auto v = loadgen::parse_duration(value, 1e-3);
      if (!v || !(*v > 0)) return error("--slo %s=%s: expected a duration > 0 (500ms, 2s)", b.name.c_str(), value.c_str());
      b.limit = *v;
    }
    for (const auto& o : sla.bounds_)
      if (o.name == b.name) return error("--slo names %s twice", b.name.c_str());
    sla.bounds_.push_back(b);
  }
  if (sla.bounds_.empty()) return error("--slo is empty (e.g. ttft_p99=500ms,tpot_p99=50ms,error_rate=0)");
  return sla;
}

std::string Sla::to_string() const {
  std::string s;
  for (const auto& b : bounds_) {
    if (!s.empty()) s += ",";
    s += b.metric == Metric::kErrorRate ? strfmt("%s=%g", b.name.c_str(), b.limit)
                                        : strfmt("%s=%gms", b.name.c_str(), b.limit * 1e3);
  }
  return s;
}

loadgen::SloSpec Sla::per_request() const {
  loadgen::SloSpec slo;
  double best_pct[4] = {-2, -2, -2, -2};
  for (const auto& b : bounds_) {
    if (b.metric == Metric::kErrorRate || b.percentile < 0) continue;
    const int i = static_cast<int>(b.metric);
    if (b.percentile <= best_pct[i]) continue;
    best_pct[i] = b.percentile;
    switch (b.metric) {
      case Metric::kTtft: slo.ttft_s = b.limit; break;
      case Metric::kTpot: slo.tpot_s = b.limit; break;
      case Metric::kItl: slo.itl_s = b.limit; break;
      case Metric::kE2e: slo.e2e_s = b.limit; break;
      case Metric::kErrorRate: break;
    }
  }
  return slo;
}

std::vector<SlaCheck> Sla::check(const RunSummary& s) const {
  std::vector<SlaCheck> out;
  for (const auto& b : bounds_) {
    SlaCheck c;
    c.name = b.name;
    c.limit = b.limit;
    if (b.metric == Metric::kErrorRate) {
      c.value = error_rate(s);
      c.met = s.completed > 0 && c.value <= b.limit;
    } else {
      const Summary& sum = summary_of(s, b.metric);
      c.value = sum.n > 0 ? stat_of(sum, b.percentile) : NAN;
      // TPOT/ITL need two tokens per answer: none at all is not a violation when other requests succeeded.
      const bool vacuous = sum.n == 0 && s.completed > s.failed &&
                           (b.metric == Metric::kTpot || b.metric == Metric::kItl);
      c.met = vacuous || (sum.n > 0 && c.value <= b.limit);
    }
    out.push_back(c);
  }
  return out;
}

bool Sla::met(const RunSummary& s) const {
  for (const auto& c : check(s))
    if (!c.met) return false;
  return true;
}

double Sla::excess(const RunSummary& s) const {
  double worst = 0;
  for (const auto& c : check(s)) {
    double e;
    if (std::isnan(c.value)) e = c.met ? 0 : 1e9;
    else if (c.limit > 0 && c.name != "error_rate") e = c.value / c.limit;
    else e = c.value <= c.limit ? 0 : 1 + (c.value - c.limit);
    worst = std::max(worst, e);
  }
  return worst;
}

EarlyStop::EarlyStop(const Sla& sla, int64_t planned, double best_goodput, double worse_ratio)
    : sla_(sla), per_request_(sla.per_request()), planned_(planned), best_goodput_(best_goodput),
      worse_ratio_(worse_ratio), over_(sla.bounds().size(), 0) {}

bool EarlyStop::on_record(const loadgen::RequestRecord& r) {
  if (!reason_.empty()) return true;
  ++seen_;
  if (first_start_s_ < 0 || r.start_s < first_start_s_) first_start_s_ = r.start_s;
  last_end_s_ = std::max(last_end_s_, r.start_s + std::max(0.0, r.e2e_s));
  if (!r.ok()) ++failed_;
  if (per_request_.met_by(r)) ++good_;
  if (planned_ <= 0) return false;  // duration-bound phases: no request count to reason about
  const auto& bounds = sla_.bounds();
  for (size_t i = 0; i < bounds.size(); ++i) {
    const SlaBound& b = bounds[i];
    if (b.metric == Metric::kErrorRate) {
      if (static_cast<double>(failed_) > b.limit * static_cast<double>(planned_)) {
        reason_ = strfmt("%lld of %lld planned requests failed: %s=%g cannot be met", static_cast<long long>(failed_),
                         static_cast<long long>(planned_), b.name.c_str(), b.limit);
        return true;
      }
      continue;
    }
    if (b.percentile < 0 || !r.ok()) continue;
    const double v = request_value(r, b.metric);
    if (v < 0 || v <= b.limit) continue;
    ++over_[i];
    const int64_t allowed = planned_ - static_cast<int64_t>(std::floor((planned_ - 1) * b.percentile / 100.0)) - 1;
    if (over_[i] > allowed) {
      reason_ = strfmt("%lld of %lld planned requests over %gms: %s cannot be met", static_cast<long long>(over_[i]),
                       static_cast<long long>(planned_), b.limit * 1e3, b.name.c_str());
      return true;
    }
  }
  if (worse_ratio_ > 0 && best_goodput_ > 0 && seen_ >= std::max<int64_t>(20, planned_ / 3)) {
    const double elapsed = last_end_s_ - first_start_s_;
    const double goodput = elapsed > 0 ? static_cast<double>(good_) / elapsed : 0;
    if (goodput < worse_ratio_ * best_goodput_) {
      reason_ = strfmt("goodput %.2f req/s after %lld requests, below %.0f%% of the best (%.2f req/s)", goodput,
                       static_cast<long long>(seen_), worse_ratio_ * 100, best_goodput_);
      return true;
    }
  }
  return false;
}

}  // namespace mopt::tune
