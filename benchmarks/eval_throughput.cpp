// `mopt eval` throughput (issue 15, acceptance 3) and the full-text perplexity check: code-qwen2-25m over the
// 29,328 tokens of code-eval.txt in windows of 1,024 (the reference protocol), through eval::evaluate() (engine,
// scheduler, prompt logits, scoring), against a reference measured in the same run: the bare runner's forward
// over the same windows, packed the same way (two windows per 2,048-token step), with the log-softmax of every
// row computed inline. The ratio says what the serving engine and the scoring cost on top of the forward passes.
//
// Each round runs the bare forward, then eval, then eval against the model itself (--ref: two engines, every row
// paired); reported: tokens/s (scored targets per wall second) and per CPU-second of the process (the figure
// least disturbed on a shared machine), each round's eval/bare ratio and their median; the perplexity against
// transformers' eval_ppl_fp32 from code-qwen2-25m.reference.json (exit code 1 when it is not within 1%).
// Usage: bench_eval_throughput [--model DIR] [--text FILE] [--threads N (0 = all cores)] [--repeats 1]
//                              [--ctx 1024] [--kv-cache-dtype auto|fp16|fp32] [--device cpu|cuda] [--no-ref]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu_time.h"
#include "core/log.h"
#include "core/mmap.h"
#include "engine/engine.h"
#include "eval/evaluate.h"
#include "eval/windows.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;
using mopt::bench::cpu_seconds;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_eval_throughput: %s\n", what.c_str());
  std::exit(2);
}

struct Timing {
  double wall = 0, cpu = 0, ppl = 0;
  int64_t scored = 0;
  double tps() const { return static_cast<double>(scored) / wall; }
  double cpu_tps() const { return static_cast<double>(scored) / cpu; }
};

// The bare runner over the windows: each forward takes whole windows (up to max_tokens tokens), every position's
// logits, the NLL of the scored targets computed from them.
Timing bare_forward(const Model& model, const RunnerOptions& ro, const std::vector<int32_t>& ids,
                    const std::vector<eval::Window>& windows) {
  auto r = create_runner(model, ro);
  if (!r) die(r.message());
  ModelRunner& runner = **r;
  const int bs = runner.default_block_size();  // as the engine's --block-size 0
  const int ctx_blocks = (static_cast<int>(windows.front().end - windows.front().begin) + bs - 1) / bs;
  const int per_step = std::max(1, ro.max_batch_tokens / static_cast<int>(windows.front().prompt_len()));
  if (Status st = runner.init_kv_cache(ctx_blocks * per_step, bs, 0); !st) die(st.message());
  const int V = runner.config().n_vocab;
  Timing t;
  double nll = 0;
  std::vector<float> logits;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (size_t w0 = 0; w0 < windows.size(); w0 += static_cast<size_t>(per_step)) {
    const size_t w1 = std::min(windows.size(), w0 + static_cast<size_t>(per_step));
    BatchArrays a;
    a.max_blocks_per_seq = ctx_blocks;
    for (size_t w = w0; w < w1; ++w) {
      const eval::Window& win = windows[w];
      const int slot0 = static_cast<int>(w - w0) * ctx_blocks * bs;
      for (int64_t p = 0; p < win.prompt_len(); ++p) {
        a.tokens.push_back(ids[static_cast<size_t>(win.begin + p)]);
        a.positions.push_back(static_cast<int32_t>(p));
        a.slot_mapping.push_back(slot0 + static_cast<int32_t>(p));
        if (p >= win.first_row()) a.logits_indices.push_back(static_cast<int32_t>(a.tokens.size()) - 1);
      }
      a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
      a.seq_lens.push_back(static_cast<int32_t>(win.prompt_len()));
      for (int b = 0; b < ctx_blocks; ++b) a.block_tables.push_back(static_cast<int32_t>(w - w0) * ctx_blocks + b);
    }
    logits.resize(a.logits_indices.size() * static_cast<size_t>(V));
    if (Status st = runner.forward(a.view(), logits.data()); !st) die(st.message());
    size_t row = 0;
    for (size_t w = w0; w < w1; ++w)
      for (int64_t j = windows[w].score_from; j < windows[w].end; ++j, ++row) {
        const float* x = &logits[row * static_cast<size_t>(V)];
        const float mx = *std::max_element(x, x + V);
        double s = 0;
        for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - mx);
        nll += mx + std::log(s) - x[ids[static_cast<size_t>(j)]];
        ++t.scored;
      }
  }
  t.wall = std::chrono::duration<double>(Clock::now() - t0).count();
  t.cpu = cpu_seconds() - c0;
  t.ppl = std::exp(nll / static_cast<double>(t.scored));
  return t;
}

Timing run_eval(const Model& model, const Tokenizer& tok, const EngineConfig& cfg, const std::vector<int32_t>& ids,
                int ctx, bool with_ref) {
  auto e = Engine::create(model, tok, cfg);
  if (!e) die(e.message());
  std::unique_ptr<Engine> ref;
  if (with_ref) {
    auto r = Engine::create(model, tok, cfg);
    if (!r) die(r.message());
    ref = std::move(r).value();
  }
  eval::EvalOptions opt;
  opt.ctx = ctx;
  const double c0 = cpu_seconds();
  auto res = eval::evaluate(**e, ref.get(), ids, opt);
  if (!res) die(res.message());
  Timing t;
  t.cpu = cpu_seconds() - c0;
  t.wall = res->seconds;
  t.scored = res->metrics.n_scored;
  t.ppl = res->metrics.ppl;
  if (with_ref && (res->metrics.kl_max != 0 || res->metrics.top1 != 1))
    die("the model against itself disagrees: KL max " + std::to_string(res->metrics.kl_max));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("MOPT_MODELS_DIR");
  const std::string models = env ? env : MOPT_MODELS_DIR;
  std::string model_path = models + "/code-qwen2-25m", text_path = models + "/code-eval.txt";
  int threads = 0, repeats = 1, ctx = 1024;
  std::string kv = "auto", device = "cpu";
  bool no_ref = false;
  CLI::App app{"mopt eval throughput and full-text perplexity"};
  app.add_option("--model", model_path);
  app.add_option("--text", text_path);
  app.add_option("--threads", threads);
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 100));
  app.add_option("--ctx", ctx)->check(CLI::Range(2, 1 << 20));
  app.add_option("--kv-cache-dtype", kv)->check(CLI::IsMember({"auto", "fp16", "fp32"}));
  app.add_option("--device", device)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--no-ref", no_ref, "skip the run against the model itself");
  CLI11_PARSE(app, argc, argv);
  set_log_level(LogLevel::kWarn);

  auto m = load_model(model_path);
  if (!m) die(m.message());
  auto tok = Tokenizer::create((*m)->vocab);
  if (!tok) die(tok.message());
  auto text = read_file(text_path);
  if (!text) die(text.message());
  const std::vector<int32_t> ids = (*tok)->encode(*text, true, false);
  auto windows = eval::plan_windows(static_cast<int64_t>(ids.size()), ctx, ctx);
  if (!windows) die(windows.message());

  EngineConfig cfg;
  cfg.max_model_len = ctx;
  cfg.max_num_seqs = 16;
  cfg.runner.device = device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
  cfg.runner.n_threads = threads;
  cfg.runner.kv_cache_dtype = kv == "fp32" ? KvCacheDtype::kFloat32 : kv == "fp16" ? KvCacheDtype::kFloat16
                                                                                   : KvCacheDtype::kAuto;
  RunnerOptions ro = cfg.runner;
  ro.max_batch_tokens = cfg.max_num_batched_tokens;
  ro.max_seqs = cfg.max_num_seqs;
  std::printf("model %s, text %s: %zu tokens, %zu windows of %d; device %s, threads %d, KV %s\n",
              model_path.c_str(), text_path.c_str(), ids.size(), windows->size(), ctx, device.c_str(), threads,
              kv.c_str());

  std::vector<double> ratios;
  Timing bare, ev, evr;
  for (int round = 0; round < repeats; ++round) {
    bare = bare_forward(**m, ro, ids, *windows);
    ev = run_eval(**m, **tok, cfg, ids, ctx, false);
    if (!no_ref) evr = run_eval(**m, **tok, cfg, ids, ctx, true);
    ratios.push_back(ev.tps() / bare.tps());
    std::printf("round %d: bare forward %.1f tokens/s (%.1f per CPU-s) | eval %.1f tokens/s (%.1f per CPU-s), "
                "ratio %.3f",
                round + 1, bare.tps(), bare.cpu_tps(), ev.tps(), ev.cpu_tps(), ratios.back());
    if (!no_ref) std::printf(" | eval --ref itself %.1f tokens/s (%.1f per CPU-s)", evr.tps(), evr.cpu_tps());
    std::printf("\n");
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("eval / bare forward, median of %d rounds: %.3f\n", repeats, ratios[ratios.size() / 2]);

  // The perplexity against transformers' figure (same protocol: windows of 1,024 side by side).
  std::ifstream rf(models + "/code-qwen2-25m.reference.json");
  if (ctx != 1024 || model_path != models + "/code-qwen2-25m" || !rf) {
    std::printf("perplexity %.4f (no transformers figure for this model / protocol)\n", ev.ppl);
    return 0;
  }
  const double want = nlohmann::json::parse(rf)["eval_ppl_fp32"].get<double>();
  const double rel = ev.ppl / want - 1;
  std::printf("perplexity %.4f over %lld targets (bare forward %.4f); transformers fp32 %.4f: %+.2f%% %s\n", ev.ppl,
              static_cast<long long>(ev.scored), bare.ppl, want, 100 * rel, std::fabs(rel) <= 0.01 ? "PASS" : "FAIL");
  return std::fabs(rel) <= 0.01 ? 0 : 1;
}
