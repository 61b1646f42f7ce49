// mopt eval: perplexity of a model over a text, and its agreement with a reference model (KL divergence, top-1,
// top-k, delta perplexity), through the serving engine; --gate turns the figures into an exit code.
//   mopt eval MODEL [--ref REFMODEL] [--ref-kv-cache-dtype D] --text FILE [--ctx N] [--stride N] [--top-k K]
//             [--json] [--progress] [--gate SPEC] [engine flags]
// --ref-kv-cache-dtype D: the reference engine runs with KV cache dtype D (the model's --kv-cache-dtype
// otherwise); without --ref the reference is MODEL itself, so e.g. `--kv-cache-dtype fp8 --ref-kv-cache-dtype
// auto` measures what the fp8 KV cache costs against the default cache.
// Exit codes: 0 done (and every gate check passed), 1 a gate check failed, 2 any error (bad flags, a malformed
// gate, unreadable model or text, models that do not share a tokenizer, a failed evaluation).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_args.h"
#include "core/mmap.h"
#include "core/progress_bar.h"
#include "engine/engine.h"
#include "eval/evaluate.h"
#include "eval/gate.h"
#include "eval/report.h"

namespace mopt::cli {
namespace {

constexpr int kExitGateFailed = 1;
constexpr int kExitError = 2;

struct EvalArgs {
  std::string model, ref, tokenizer, text;
  eval::EvalOptions opt;
  bool json = false;
  bool progress = false;
  bool no_bos = false;
  std::string gate;
  EngineConfig engine;
  bool max_num_seqs_given = false;
  KvCacheDtype ref_kv = KvCacheDtype::kAuto;
  bool ref_kv_given = false;  // --ref-kv-cache-dtype
};

int fail(const std::string& message) {
  std::fprintf(stderr, "mopt eval: %s\n", message.c_str());
  return kExitError;
}

Result<LoadedModel> load(const std::string& path, const std::string& tokenizer, const char* what) {
  ModelArgs ma;
  ma.model = path;
  ma.tokenizer = tokenizer;
  Result<LoadedModel> m = load_model_and_tokenizer(ma);
  if (!m) return m.status().with_context(strfmt("loading the %s '%s'", what, path.c_str()));
  if (!m->tokenizer) return error("the %s '%s' has no tokenizer: eval needs one to read the text", what, path.c_str());
  return m;
}

int run_eval(EvalArgs& a) {
  std::vector<eval::GateCheck> gate;
  if (!a.gate.empty()) {
    auto g = eval::parse_gate(a.gate);
    if (!g) return fail(g.message());
    gate = std::move(g).value();
    if (a.ref.empty() && !a.ref_kv_given)
      for (const eval::GateCheck& c : gate)
        if (eval::gate_needs_reference(c.metric))
          return fail(strfmt("--gate '%s' compares against a reference: give --ref or --ref-kv-cache-dtype",
                             c.text.c_str()));
  }
  if (a.engine.speculative.method != SpecMethod::kNone)
    return fail("--speculative-config: mopt eval scores the text's own tokens in prefill steps, where nothing is "
                "proposed or verified; drop the flag (bench_speculative measures speculative decoding)");
  Result<std::string> text = read_file(a.text);
  if (!text) return fail(text.status().with_context("--text").message());
  if (text->empty()) return fail(strfmt("the text file '%s' is empty", a.text.c_str()));

  Result<LoadedModel> model = load(a.model, a.tokenizer, "model");
  if (!model) return fail(model.message());
  std::optional<LoadedModel> ref;
  if (!a.ref.empty()) {
    Result<LoadedModel> r = load(a.ref, "", "reference");
    if (!r) return fail(r.message());
    ref = std::move(r).value();
    const int nv = model->model->config.n_vocab, ref_nv = ref->model->config.n_vocab;
    if (nv != ref_nv)
      return fail(strfmt("the model scores %d tokens per position but the reference %d: KL and agreement compare "
                         "the same vocabulary; give a reference with the model's tokenizer", nv, ref_nv));
    if (Status st = eval::check_same_tokenizer(*model->tokenizer, *ref->tokenizer, *text, !a.no_bos); !st)
      return fail(st.message());
  }
  const std::vector<int32_t> tokens = model->tokenizer->encode(*text, !a.no_bos, false);

  // Windows are the longest requests: size the engines for them unless told otherwise.
  const int model_ctx = model->model->config.context_length;
  if (model_ctx > 0 && a.opt.ctx > model_ctx)
    return fail(strfmt("--ctx %d exceeds the model's context length %d", a.opt.ctx, model_ctx));
  if (a.engine.max_model_len == 0) a.engine.max_model_len = a.opt.ctx;
  // Windows in flight stay few (a step's token budget), so a small --max-num-seqs keeps the CPU's KV pool small;
  // the CUDA runner also sizes its logits buffer by it (rows per device-to-host chunk), so it gets more there.
  if (!a.max_num_seqs_given)
    a.engine.max_num_seqs = resolve_device(a.engine.runner.device) == DeviceKind::kCuda ? 256 : 16;
  auto engine = Engine::create(*model->model, *model->tokenizer, a.engine);
  if (!engine) return fail(engine.status().with_context("model").message());
  std::unique_ptr<Engine> ref_engine;
  std::string ref_label = a.ref;
  if (ref || a.ref_kv_given) {
    EngineConfig rc = a.engine;
    if (a.ref_kv_given) rc.runner.kv_cache_dtype = a.ref_kv;
    // Without --ref the reference is the model itself (read-only weights shared by both engines).
    const LoadedModel& rm = ref ? *ref : *model;
    if (!ref) ref_label = a.model;
    if (a.ref_kv_given) ref_label += strfmt(" (--kv-cache-dtype %s)", kv_cache_dtype_name(a.ref_kv));
    auto e = Engine::create(*rm.model, *rm.tokenizer, rc);
    if (!e) return fail(e.status().with_context("reference").message());
    ref_engine = std::move(e).value();
  }

  ProgressBar bar(ProgressBar::auto_style(a.progress), "eval", "tokens");
  auto result = eval::evaluate(**engine, ref_engine.get(), tokens, a.opt, [&](const eval::EvalProgress& p) {
    bar.update(p.tokens_done, p.tokens_total, p.seconds);
  });
  bar.finish();
  if (!result) return fail(result.message());

  std::vector<eval::GateOutcome> outcomes;
  if (!gate.empty()) {
    auto o = eval::apply_gate(gate, result->metrics);
    if (!o) return fail(o.message());
    outcomes = std::move(o).value();
  }
  std::string model_label = a.model;
  if (a.ref_kv_given)
    model_label += strfmt(" (--kv-cache-dtype %s)", kv_cache_dtype_name(a.engine.runner.kv_cache_dtype));
  eval::ReportLabels labels{model_label, ref_label, a.text, device_name((*engine)->config().runner.device)};
  const std::string gate_lines = eval::format_gate(outcomes);
  if (a.json) {
    std::printf("%s\n", eval::to_json(*result, labels, gate.empty() ? nullptr : &outcomes).dump(2).c_str());
    std::fputs(gate_lines.c_str(), stderr);
  } else {
    std::fputs(eval::format_table(*result, labels).c_str(), stdout);
    std::fputs(gate_lines.c_str(), stdout);
  }
  for (const eval::GateOutcome& o : outcomes)
    if (!o.passed) return kExitGateFailed;
  return 0;
}

Registration reg("eval", 45, [](CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Perplexity over a text; KL divergence, top-1 / top-k agreement against a reference model");
  cmd->add_option("model", args->model, "Model: a GGUF file, a Hugging Face folder, or a llama2.c checkpoint")
      ->required();
  cmd->add_option("--ref", args->ref, "Reference model (usually the unquantized one); must share the tokenizer");
  cmd->add_option("--ref-kv-cache-dtype", args->ref_kv,
                  "KV cache dtype of the reference engine (same spellings as --kv-cache-dtype); without --ref the "
                  "reference is MODEL itself, e.g. --kv-cache-dtype fp8 --ref-kv-cache-dtype auto")
      ->transform(CLI::CheckedTransformer(kv_cache_dtype_spellings(), CLI::ignore_case));
  cmd->add_option("--text", args->text, "Text file to evaluate on (tokenized once, as it is)")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer .bin for a llama2.c checkpoint MODEL");
  cmd->add_option("--ctx", args->opt.ctx, "Tokens per context window")->check(CLI::Range(2, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--stride", args->opt.stride,
                  "Tokens from one window's start to the next; each window scores only tokens no earlier window "
                  "scored (0 = --ctx: windows side by side)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  cmd->add_option("--top-k", args->opt.top_k, "k of the top-k overlap")->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_flag("--no-bos", args->no_bos, "Do not add the BOS token the model's vocabulary asks for");
  cmd->add_flag("--json", args->json, "Print every figure as JSON on stdout (gate results also on stderr)");
  cmd->add_flag("--progress", args->progress, "Progress on stderr even when it is not a terminal (lines)");
  cmd->add_option("--gate", args->gate,
                  "Comma-separated checks, e.g. top1>=0.995,kl<=0.01 (metrics: top1, topk, kl, kl_p99, kl_max, "
                  "ppl, ppl_delta, ppl_ratio; OP >=, <=, >, <); exit code 1 when one fails");
  add_engine_flags(*cmd, args->engine);
  cmd->get_option("--max-num-seqs")->default_str("16 on the CPU, 256 on CUDA");
  cmd->callback([args, cmd]() {
    args->max_num_seqs_given = cmd->count("--max-num-seqs") > 0;
    args->ref_kv_given = cmd->count("--ref-kv-cache-dtype") > 0;
    set_exit_code(run_eval(*args));
  });
});

}  // namespace
}  // namespace mopt::cli
