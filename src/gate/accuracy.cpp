// The accuracy gate: `mopt eval`'s comparison of the served model against a baseline model over a text (KL,
// top-1 / top-k agreement, perplexity), through the serving engine in this process, checked with eval's gate
// expression (Thresholds::accuracy, e.g. "top1>=0.99,kl<=0.05").
#include <algorithm>

#include "core/mmap.h"
#include "core/strfmt.h"
#include "engine/engine.h"
#include "eval/evaluate.h"
#include "eval/gate.h"
#include "gate/gate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt::gate {

namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Result<Loaded> load(const std::string& path, const char* what) {
  Loaded l;
  auto m = load_model(path);
  if (!m) return m.status().with_context(strfmt("the %s '%s'", what, path.c_str()));
  l.model = std::move(*m);
  if (l.model->vocab.kind == TokenizerKind::kNone) return error("the %s '%s' has no tokenizer", what, path.c_str());
  MOPT_ASSIGN_OR_RETURN(l.tokenizer, Tokenizer::create(l.model->vocab));
  return l;
}

}  // namespace

GateResult accuracy_gate(const GateOptions& opt) {
  GateResult g;
  g.name = "accuracy";
  g.threshold = opt.thresholds.accuracy + " against the baseline";
  if (opt.baseline.empty()) {
    g.verdict = Verdict::kSkip;
    g.measured = std::string(1, '-');
    g.detail = "no --baseline model given: nothing to compare the served model against";
    return g;
  }
  auto fail = [&](const Status& st) { return error_result(g.name, g.threshold, st.message()); };
  auto checks = eval::parse_gate(opt.thresholds.accuracy);
  if (!checks) return fail(checks.status().with_context("threshold accuracy"));
  auto text = read_file(opt.eval_text);
  if (!text) return fail(text.status().with_context("--eval-text"));
  auto model = load(opt.model, "model");
  if (!model) return fail(model.status());
  auto base = load(opt.baseline, "baseline");
  if (!base) return fail(base.status());
  if (model->model->config.n_vocab != base->model->config.n_vocab)
    return fail(error("the model has %d tokens and the baseline %d: they must share a tokenizer",
                      model->model->config.n_vocab, base->model->config.n_vocab));
  if (Status st = eval::check_same_tokenizer(*model->tokenizer, *base->tokenizer, *text, true); !st) return fail(st);
  const std::vector<int32_t> tokens = model->tokenizer->encode(*text, true, false);
  eval::EvalOptions eo;
  const int ctx = std::min(model->model->config.context_length, base->model->config.context_length);
  eo.ctx = std::min(eo.ctx, ctx > 0 ? ctx : eo.ctx);
  EngineConfig ec;
  ec.runner.device = opt.is_cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  ec.max_model_len = eo.ctx;
  ec.max_num_seqs = opt.is_cuda ? 256 : 16;  // as mopt eval: few windows in flight keep the CPU's KV pool small
  auto me = Engine::create(*model->model, *model->tokenizer, ec);
  if (!me) return fail(me.status().with_context("model engine"));
  auto be = Engine::create(*base->model, *base->tokenizer, ec);
  if (!be) return fail(be.status().with_context("baseline engine"));
  auto r = eval::evaluate(**me, be->get(), tokens, eo);
  if (!r) return fail(r.status());
  auto outcomes = eval::apply_gate(*checks, r->metrics);
  if (!outcomes) return fail(outcomes.status());
  g.verdict = Verdict::kPass;
  for (const auto& o : *outcomes) {
    g.measured += strfmt("%s%s %.4g", g.measured.empty() ? "" : ", ", eval::gate_metric_name(o.check.metric), o.value);
    g.data[eval::gate_metric_name(o.check.metric)] = o.value;
    if (!o.passed) {
      g.verdict = Verdict::kFail;
      g.detail += (g.detail.empty() ? "" : "; ") + o.check.text + " does not hold";
    }
  }
  // Every agreement figure, whichever the expression checks (a KL-only gate still shows the top-1 agreement).
  const eval::EvalMetrics& m = r->metrics;
  g.measured += strfmt(" (%lld tokens: top-1 %.2f%%, top-%d %.2f%%, KL mean %.4g / P99 %.4g, ppl %.3f vs %.3f)",
                       static_cast<long long>(m.n_scored), m.top1 * 100, m.top_k, m.topk * 100, m.kl_mean, m.kl_p99,
                       m.ppl, m.ref_ppl);
  g.data["tokens"] = m.n_scored;
  g.data["ppl"] = m.ppl;
  g.data["baseline_ppl"] = m.ref_ppl;
  g.data["metrics"] = {{"top1", m.top1}, {"topk", m.topk}, {"top_k", m.top_k}, {"kl", m.kl_mean}, {"kl_p99", m.kl_p99},
                   {"kl_max", m.kl_max}, {"ppl_ratio", m.ppl_ratio}};
  g.data["baseline"] = opt.baseline;
  g.detail += std::string(g.detail.empty() ? "" : "; ") + "baseline " + opt.baseline;
  return g;
}

}  // namespace mopt::gate
