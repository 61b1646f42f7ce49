#include "eval/report.h"

#include "core/strfmt.h"

namespace mopt::eval {

std::string format_table(const EvalResult& r, const ReportLabels& labels) {
  const EvalMetrics& m = r.metrics;
  std::string out = strfmt("%s on %s: %lld tokens, %d window%s of %d (stride %d), %lld targets scored\n",
                           labels.model.c_str(), labels.text.c_str(), static_cast<long long>(r.text_tokens),
                           r.n_windows, r.n_windows == 1 ? "" : "s", r.ctx, r.stride,
                           static_cast<long long>(m.n_scored));
  if (!m.has_ref) {
    out += strfmt("  perplexity          %12.4f\n", m.ppl);
    out += strfmt("  mean NLL (nats)     %12.6f\n", m.nll);
  } else {
    out += strfmt("  reference: %s\n", labels.ref.c_str());
    out += strfmt("                      %12s %12s\n", "model", "reference");
    out += strfmt("  perplexity          %12.4f %12.4f\n", m.ppl, m.ref_ppl);
    out += strfmt("  mean NLL (nats)     %12.6f %12.6f\n", m.nll, m.ref_nll);
    out += strfmt("  delta perplexity    %+12.4f   (ratio %.5f)\n", m.ppl_delta, m.ppl_ratio);
    out += strfmt("  KL(ref||model) nats mean %.6g   P99 %.6g   max %.6g\n", m.kl_mean, m.kl_p99, m.kl_max);
    out += strfmt("  top-1 agreement     %11.3f%%\n", 100 * m.top1);
    if (m.top1_flips > 0)
      out += strfmt("  top-1 flips %lld: reference top-1/top-2 margin there median %.3g, P90 %.3g, max %.3g nats; "
                    "%.2f%% of targets within the P90\n",
                    static_cast<long long>(m.top1_flips), m.flip_margin_median, m.flip_margin_p90, m.flip_margin_max,
                    100 * m.near_tie_share);
    const int pad = m.top_k < 10 ? 6 : m.top_k < 100 ? 5 : 4;  // the figures line up under the column above
    out += strfmt("  top-%d overlap %*s%11.3f%%\n", m.top_k, pad, "", 100 * m.topk);
  }
  out += strfmt("  %.2f s on %s: %.1f tokens/s%s\n", r.seconds, labels.device.c_str(), r.tokens_per_second,
                m.has_ref ? " (both models)" : "");
  return out;
}

std::string format_gate(const std::vector<GateOutcome>& outcomes) {
  std::string out;
  for (const GateOutcome& o : outcomes)
    out += strfmt("gate: %s %s (%s = %.6g)\n", o.passed ? "PASS" : "FAIL", o.check.text.c_str(),
                  gate_metric_name(o.check.metric), o.value);
  return out;
}

nlohmann::json to_json(const EvalResult& r, const ReportLabels& labels, const std::vector<GateOutcome>* gate) {
  const EvalMetrics& m = r.metrics;
  nlohmann::json j;
  j["model"] = labels.model;
  j["reference"] = m.has_ref ? nlohmann::json(labels.ref) : nlohmann::json(nullptr);
  j["text"] = labels.text;
  j["device"] = labels.device;
  // Key by key, as docs/eval.md lists them; `duplicates` pairs this object with plan/plan_report.cpp's "ceilings"
  // by shape: two different reports, not one piece of logic.
  j["protocol"] = {{"ctx", r.ctx},
                   {"stride", r.stride},
                   {"windows", r.n_windows},
                   {"text_tokens", r.text_tokens},
                   {"scored_tokens", m.n_scored},
                   {"forward_tokens", r.forward_tokens},
                   {"top_k", m.top_k}};
  j["ppl"] = m.ppl;
  j["nll"] = m.nll;
  if (m.has_ref) {
    j["ref_ppl"] = m.ref_ppl;
    j["ref_nll"] = m.ref_nll;
    j["ppl_delta"] = m.ppl_delta;
    j["ppl_ratio"] = m.ppl_ratio;
    j["kl"] = {{"mean", m.kl_mean}, {"p99", m.kl_p99}, {"max", m.kl_max}};
    j["top1"] = m.top1;
    j["topk"] = m.topk;
    j["top1_flips"] = {{"count", m.top1_flips},
                       {"ref_margin_median", m.flip_margin_median},
                       {"ref_margin_p90", m.flip_margin_p90},
                       {"ref_margin_max", m.flip_margin_max},
                       {"near_tie_share", m.near_tie_share}};
  }
  nlohmann::json wins = nlohmann::json::array();
  for (const WindowScore& w : r.windows) {
    nlohmann::json x = {{"begin", w.begin}, {"end", w.end}, {"scored", w.n_scored}, {"nll", w.nll}};
    if (m.has_ref) {
      x["ref_nll"] = w.ref_nll;
      x["kl"] = w.kl_mean;
    }
    wins.push_back(std::move(x));
  }
  j["windows"] = std::move(wins);
  j["seconds"] = r.seconds;
  j["tokens_per_second"] = r.tokens_per_second;
  if (gate) {
    nlohmann::json g = nlohmann::json::array();
    bool all = true;
    for (const GateOutcome& o : *gate) {
      g.push_back({{"check", o.check.text}, {"metric", gate_metric_name(o.check.metric)}, {"value", o.value},
                   {"threshold", o.check.threshold}, {"passed", o.passed}});
      all = all && o.passed;
    }
    j["gate"] = {{"passed", all}, {"checks", g}};
  } else {
    j["gate"] = nullptr;
  }
  return j;
}

}  // namespace mopt::eval
