// Speculative decoding speed (issue 20, acceptance 4): single-stream generation of code-qwen2-25m on a
// code-editing workload, with n-gram prompt lookup vs without, in the same run, through the full engine.
//
// Workload: for each module of code-eval.txt (held out from the model's training), the prompt holds the module's
// first --lines lines and asks for the file again ("# The same file, rewritten:" and its first line); the greedy
// output repeats much of the file, which is what prompt lookup proposes. Each prompt runs --rounds times through
// two engines made once (plain, and with --speculative-config), alternating plain / speculative so that both see
// the same machine load; the faster run of each counts. Reported per file and in total: decode tokens/s (tokens
// after the first / time after the first token), mean acceptance length (tokens per verification round, 1 +
// accepted / rounds), acceptance rate (accepted / proposed tokens), and the speed-up. The greedy outputs of both
// engines must be identical round by round (checked; a difference is an error): round 1 prefills the whole
// prompt, later rounds find its full blocks in the prefix cache and prefill only the rest (fewer rows, other
// GEMM plans, so bf16 roundings and a near-tie may differ from round 1 in both engines alike; reported, not an
// error). On CUDA both engines share one fresh plan cache (the same GEMM tilings). Then the proposer alone, replayed
// on each speculative output (replay_ngram): the share of steps with a proposal and the tokens a step yields, which
// must equal the engine's own counters.
// --profile (CUDA): on a third runner made as the speculative engine's (same options, same plan cache), one
// sequence at position --profile-pos: wall time per step (graph replay + device sampling, as the engine runs
// it) for 1 .. k + 1 rows, and the GPU time per kernel class of an eager decode step and an eager verification
// step of k + 1 rows (ModelRunner::profile_step).
// Usage: bench_speculative [--model DIR ($MOPT_MODELS_DIR/code-qwen2-25m)] [--eval-text FILE]
//                          [--device cpu|cuda] [--threads 0] [--speculative-config JSON] [--lines 40]
//                          [--tokens 256] [--rounds 2] [--profile] [--profile-pos 400] [--one-row-eps X]
//                          [--no-verify-refine]
//                          [--row-costs C1,C2,...] [--draft-layers N]
// --row-costs C1,C2,... (a step of 1, 2, ... rows in one-row steps; e.g. an earlier --profile's): after the table,
// the speed-up that cost model predicts for the proposer replayed on the plain outputs, and its bound with every
// draft cut to the tokens the model accepts (print_cost_model). --profile prints the same with its own step times.
// --draft-layers N: the speculative engine proposes with a draft model, the target's own first N layers then its
// final norm and output (an early exit: a draft with the target's tokenizer when no smaller model has one),
// num_speculative_tokens from --speculative-config; the n-gram replay is then left out, and --row-costs
// (as with any draft model) refused.
// --one-row-eps X (CUDA): both engines choose their one-row GEMM plans with the verification rows in view
// (RunnerOptions::one_row_plan_eps; docs/speculative.md); absent: the CUDA default (kDefaultOneRowPlanEps); 0: the
// fastest one-row tiling.
// --no-verify-refine (CUDA): verification graphs are not refined in the graph (RunnerOptions::
// refine_verification_graphs), the baseline of that refinement.
// Logging is at warnings unless MOPT_LOG says otherwise (MOPT_LOG=debug: e.g. every GEMM plan as it is tuned).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bench_model.h"
#include "core/log.h"
#include "core/strfmt.h"
#include "engine/engine.h"
#include "engine/speculative/ngram_proposer.h"
#include "model/model.h"
#include "server/speculative_config.h"
#include "tokenizer/tokenizer.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

struct Run {
  std::vector<int32_t> tokens;
  double decode_s = 0;       // first token -> last token
  double total_s = 0;        // add_request -> last token
  uint64_t drafts = 0, draft_tokens = 0, accepted = 0;
  uint64_t steps = 0;        // engine steps (prefill included)
  uint64_t decode_steps = 0;  // of which had no prompt token
  uint64_t verify_steps = 0;  // of which verified a proposal
  StepPhaseSeconds phase;     // the engine's step phases over the decode steps
  double decode_tps() const { return tokens.size() > 1 ? (tokens.size() - 1) / decode_s : 0; }
};

Run generate(Engine& eng, const std::vector<int32_t>& prompt, int max_tokens) {
  const EngineStats s0 = eng.stats();
  Run r;
  RequestSpec spec;
  spec.prompt = prompt;
  spec.params.temperature = 0;
  spec.params.max_tokens = max_tokens;
  Clock::time_point first{};
  const auto t0 = Clock::now();
  AddResult ar = eng.add_request(spec, [&](const RequestOutput& o) {
    if (r.tokens.empty() && !o.new_tokens.empty()) first = Clock::now();
    r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
  });
  if (ar.error != AddError::kNone) {
    std::fprintf(stderr, "add_request: %s\n", ar.message.c_str());
    std::exit(1);
  }
  while (eng.has_unfinished()) eng.step();
  const auto t1 = Clock::now();
  r.decode_s = std::chrono::duration<double>(t1 - first).count();
  r.total_s = std::chrono::duration<double>(t1 - t0).count();
  const EngineStats s1 = eng.stats();
  r.drafts = s1.spec_num_drafts - s0.spec_num_drafts;
  r.draft_tokens = s1.spec_num_draft_tokens - s0.spec_num_draft_tokens;
  r.accepted = s1.spec_num_accepted_tokens - s0.spec_num_accepted_tokens;
  r.steps = s1.steps - s0.steps;
  r.verify_steps = s1.spec_verify_steps - s0.spec_verify_steps;
  r.decode_steps = s1.decode_steps - s0.decode_steps;
  r.phase = {s1.phase_s.propose - s0.phase_s.propose, s1.phase_s.schedule - s0.phase_s.schedule,
             s1.phase_s.forward - s0.phase_s.forward, s1.phase_s.output - s0.phase_s.output,
             s1.phase_s.forward_verify - s0.phase_s.forward_verify};
  return r;
}

// The speculative schedule replayed on the plain greedy output (no model run): greedy verification emits exactly
// the plain tokens, so each step's proposal (the engine's propose_ngram over prompt + output so far, k capped by
// max_tokens as the engine caps it) and how many of its tokens the model accepts follow from the prompt and that
// output alone. Separates the proposer's figures from the step costs, and checks the engine's counters.
// row_cost[r - 1]: the cost of a step of r rows relative to a one-row step (a cost model; empty: cost not summed).
// oracle: each step proposes the match's whole continuation (up to k tokens) cut to the tokens the model accepts
// (nothing when it accepts none): no row is ever rejected, an upper bound for any rule that only chooses how much
// of the same match's continuation to propose.
struct Replay {
  uint64_t steps = 0, tokens = 0;  // decode steps after the first token, and the tokens they emitted
  uint64_t drafts = 0, draft_tokens = 0, accepted = 0;
  double cost = 0;  // sum of row_cost over the steps
};

Replay replay_ngram(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out, const SpeculativeConfig& sc,
                    int max_tokens, std::span<const double> row_cost = {}, bool oracle = false) {
  Replay r;
  if (out.empty()) return r;
  std::vector<int32_t> ctx = prompt, draft;
  ctx.push_back(out[0]);
  for (size_t i = 1; i < out.size();) {
    const int k = std::min<int>(sc.num_speculative_tokens, max_tokens - static_cast<int>(i) - 1);
    draft.clear();
    if (k > 0 && !oracle) propose_ngram(ctx, sc.prompt_lookup_min, sc.prompt_lookup_max, k, draft);
    if (k > 0 && oracle) {
      const NgramMatch mt = find_ngram(ctx, sc.prompt_lookup_min, sc.prompt_lookup_max, 0);
      if (mt.end >= 0) {
        const auto from = ctx.begin() + mt.end + 1;
        draft.assign(from, from + std::min<std::ptrdiff_t>(k, ctx.end() - from));
      }
    }
    size_t a = 0;
    while (a < draft.size() && i + a < out.size() && draft[a] == out[i + a]) ++a;
    if (oracle) draft.resize(a);
    if (!draft.empty()) {
      ++r.drafts;
      r.draft_tokens += draft.size();
      r.accepted += a;
    }
    if (!row_cost.empty()) r.cost += row_cost[std::min(draft.size(), row_cost.size() - 1)];
    const size_t emit = std::min(a + 1, out.size() - i);
    ctx.insert(ctx.end(), out.begin() + static_cast<std::ptrdiff_t>(i),
               out.begin() + static_cast<std::ptrdiff_t>(i + emit));
    i += emit;
    ++r.steps;
    r.tokens += emit;
  }
  return r;
}

// The modules of code-eval.txt: each starts with a line opening its docstring.
std::vector<std::pair<std::string, std::vector<std::string>>> split_modules(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  static const char* starts[][2] = {{"\"\"\"Text wrapping", "textwrap"},
                                    {"\"\"\"Implementation of JSONDecoder", "json/decoder"},
                                    {"\"\"\"Heap queue", "heapq"},
                                    {"\"\"\"Fraction, infinite-precision", "fractions"}};
  std::vector<std::pair<std::string, std::vector<std::string>>> mods;
  std::string line;
  while (std::getline(in, line)) {
    for (const auto& s : starts)
      if (line.rfind(s[0], 0) == 0) mods.push_back({s[1], {}});
    if (!mods.empty()) mods.back().second.push_back(line);
  }
  if (mods.size() != 4) {
    std::fprintf(stderr, "%s: expected the 4 modules of code-eval.txt, found %zu\n", path.c_str(), mods.size());
    std::exit(1);
  }
  return mods;
}

// The first index where a and b differ (the shorter length when one is a prefix of the other).
size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// --profile: see the header. Returns false (after a message) when the runner cannot be made or run. row_cost[r - 1]:
// the measured wall time of a step of r rows over a one-row step's.
bool profile_steps(const Model& model, const EngineConfig& scfg, int pos, std::vector<double>& row_cost) {
  RunnerOptions ro = scfg.runner;  // as Engine::create makes the speculative engine's runner
  ro.max_batch_tokens = scfg.max_num_batched_tokens;
  ro.max_seqs = scfg.max_num_seqs;
  ro.spec_tokens = scfg.speculative.num_speculative_tokens;
  const int k = ro.spec_tokens, n_vocab = model.config.n_vocab;
  auto rr = create_runner(model, ro);
  if (!rr) {
    std::fprintf(stderr, "profile: %s\n", rr.message().c_str());
    return false;
  }
  ModelRunner& run = *rr.value();
  // A pool as wide as the model's context (the runner sizes its block tables, and so the attention's fixed split
  // count, by the context), with room for the sequence.
  constexpr int kBs = 16;
  const int ctx = std::max(model.config.context_length, pos + k + 1);
  const int n_blocks = (ctx + kBs - 1) / kBs + 2;
  Status st = run.init_kv_cache(n_blocks, kBs, 0);
  if (st) st = run.warmup([](int, int, const std::string&) {}).status();
  if (!st) {
    std::fprintf(stderr, "profile: %s\n", st.message().c_str());
    return false;
  }
  // One sequence's step of `rows` tokens at positions pos .. pos + rows - 1, every row's logits (rows = 1: a
  // decode step; more: a verification step, the real token and rows - 1 proposals).
  auto step = [&](int rows) {
    BatchArrays a;
    a.max_blocks_per_seq = n_blocks;
    for (int i = 0; i < rows; ++i) {
      a.tokens.push_back((17 + 31 * i) % n_vocab);
      a.positions.push_back(pos + i);
      a.slot_mapping.push_back(pos + i);
      a.logits_indices.push_back(i);
    }
    a.query_start.push_back(rows);
    a.seq_lens.push_back(pos + rows);
    for (int b = 0; b < n_blocks; ++b) a.block_tables.push_back(b);
    return a;
  };
  const int max_rows = std::min(k + 1, run.max_sample_rows() > 0 ? run.max_sample_rows() : k + 1);
  std::printf("\nprofile at position %d (%s): wall time per step, graph replay + greedy pick on the device "
              "(forward_sample, as the engine runs it), median of 200\n", pos, device_name(run.device()));
  std::vector<int32_t> out(static_cast<size_t>(max_rows));
  double one_row_us = 0;
  for (int rows = 1; rows <= max_rows; ++rows) {
    const BatchArrays a = step(rows);
    const std::vector<RowSampling> params(static_cast<size_t>(rows));  // greedy
    std::vector<double> us;
    for (int i = 0; i < 220 && st; ++i) {
      const auto t0 = Clock::now();
      st = run.forward_sample(a.view(), params, out.data());
      if (i >= 20) us.push_back(1e6 * std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (!st) break;
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    const double med = us[us.size() / 2];
    if (rows == 1) one_row_us = med;
    row_cost.push_back(med / one_row_us);
    std::printf("  %d row%s %8.1f us  (%.2fx one row)%s\n", rows, rows == 1 ? " " : "s", med, med / one_row_us,
                rows == 1 ? "  decode step" : "  verification step");
  }
  if (!st) {
    std::fprintf(stderr, "profile: %s\n", st.message().c_str());
    return false;
  }
  // GPU time per kernel class: an eager decode step and an eager verification step of max_rows rows.
  auto p1 = run.profile_step(step(1).view());
  auto pk = run.profile_step(step(max_rows).view());
  if (!p1 || !pk) {
    std::fprintf(stderr, "profile: %s\n", (!p1 ? p1 : pk).message().c_str());
    return false;
  }
  std::printf("GPU time per kernel class, one eager step each (events between kernel classes: no PDL overlap, "
              "so the totals exceed a replay's; the decode step's attention splits by its own length, the "
              "graph's by the context)\n  %-32s %10s %12s %7s\n", "class", "1 row us",
              strfmt("%d rows us", max_rows).c_str(), "ratio");
  std::vector<std::string> names;
  for (const StepProfile* p : {&pk.value(), &p1.value()})
    for (const StepProfile::Class& c : p->classes)
      if (std::find(names.begin(), names.end(), c.name) == names.end()) names.push_back(c.name);
  for (const std::string& n : names) {
    const StepProfile::Class* a = p1.value().find(n);
    const StepProfile::Class* b = pk.value().find(n);
    const double ua = a ? a->us : 0, ub = b ? b->us : 0;
    std::printf("  %-32s %10.1f %12.1f %6.2fx  (%d launches)\n", n.c_str(), ua, ub, ua > 0 ? ub / ua : 0.0,
                b ? b->launches : a->launches);
  }
  std::printf("  %-32s %10.1f %12.1f %6.2fx\n", "total", p1.value().total_us, pk.value().total_us,
              p1.value().total_us > 0 ? pk.value().total_us / p1.value().total_us : 0.0);
  return true;
}

// The proposer's figures under a cost model (row_cost[r - 1]: a step of r rows against a one-row step): the
// speed-up the rule predicts (tokens over summed step costs, a plain step costing 1 per token) and the bound of
// drafts cut to what the model accepts, over the plain outputs.
void print_cost_model(const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>& texts,
                      const SpeculativeConfig& sc, int max_tokens, std::span<const double> row_cost,
                      const char* source) {
  Replay rule, oracle;
  for (const auto& [prompt, out] : texts) {
    for (int o = 0; o < 2; ++o) {
      const Replay x = replay_ngram(prompt, out, sc, max_tokens, row_cost, o == 1);
      Replay& acc = o ? oracle : rule;
      acc.tokens += x.tokens;
      acc.cost += x.cost;
    }
  }
  std::string costs;
  for (double c : row_cost) costs += strfmt(" %.2f", c);
  std::printf("cost model (%s; a step of 1, 2, ... rows costs%s one-row steps): predicted speed-up %.2fx; with each "
              "draft cut to the tokens the model accepts (the bound for rules choosing the draft length) %.2fx\n",
              source, costs.c_str(), rule.tokens / std::max(rule.cost, 1e-9),
              oracle.tokens / std::max(oracle.cost, 1e-9));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"speculative decoding (n-gram prompt lookup) vs plain decoding, single stream"};
  const char* env_dir = std::getenv("MOPT_MODELS_DIR");  // as the tests: overrides the build's models folder
  const std::string models = env_dir && *env_dir ? env_dir : MOPT_MODELS_DIR;
  std::string model_path = models + "/code-qwen2-25m";
  std::string eval_path = models + "/code-eval.txt";
  std::string device = "cpu";
  std::string spec_json =
      R"({"method":"ngram","num_speculative_tokens":7,"prompt_lookup_max":4,"prompt_lookup_min":1})";
  int threads = 0, lines = 40, tokens = 256, rounds = 2, profile_pos = 400;
  float one_row_eps = -1.f;  // < 0: the runner's default
  bool profile = false;
  app.add_option("--model", model_path, "model (file or Hugging Face folder)");
  app.add_option("--eval-text", eval_path, "code-eval.txt (the files to edit)");
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--threads", threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--speculative-config", spec_json, "vLLM's JSON (default: ngram, 7 tokens, lookup 1-4)");
  app.add_option("--lines", lines, "lines of each module in the prompt")->check(CLI::Range(1, 100000));
  app.add_option("--tokens", tokens, "tokens generated per request")->check(CLI::Range(2, 100000));
  app.add_option("--rounds", rounds, "runs of each side per file (the faster counts)")->check(CLI::Range(1, 100));
  app.add_flag("--profile", profile, "CUDA: time decode and verification steps, GPU time per kernel class");
  app.add_option("--profile-pos", profile_pos, "--profile: the sequence's position")->check(CLI::Range(1, 1 << 20));
  int draft_layers = 0;
  app.add_option("--draft-layers", draft_layers, "draft model: the target's first N layers (an early exit); "
                 "k from --speculative-config")->check(CLI::Range(1, 1 << 16));
  std::vector<double> row_costs;
  app.add_option("--row-costs", row_costs,
                 "cost model: steps of 1, 2, ... rows in one-row steps (default: --profile's)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--one-row-eps", one_row_eps, "CUDA: one-row plans within 1 + X of the fastest, by 8-row time")
      ->check(CLI::Range(0.0, 1.0));
  bool no_verify_refine = false;
  app.add_flag("--no-verify-refine", no_verify_refine,
               "CUDA: verification graphs keep the isolated timings' plans (no in-graph refinement)");
  CLI11_PARSE(app, argc, argv);
  if (no_verify_refine && device != "cuda") {
    std::fprintf(stderr, "--no-verify-refine needs --device cuda (the CPU runner has no graphs)\n");
    return 1;
  }
  if (one_row_eps > 0.f && device != "cuda") {
    std::fprintf(stderr, "--one-row-eps needs --device cuda (the CPU runner has no GEMM plans to choose)\n");
    return 1;
  }
  if (profile && device != "cuda") {
    std::fprintf(stderr, "--profile needs --device cuda (the CPU runner has no per-kernel profile)\n");
    return 1;
  }
  if (!std::getenv("MOPT_LOG")) set_log_level(LogLevel::kWarn);  // MOPT_LOG=debug: e.g. the GEMM plans tuned

  auto sc = parse_speculative_config(spec_json);
  if (!sc) {
    std::fprintf(stderr, "%s\n", sc.message().c_str());
    return 1;
  }
  const bench::BenchModel bm = bench::load_model_or_exit(model_path);
  const Model& model = *bm.model;
  const Tokenizer& tok = *bm.tokenizer;
  EngineConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_model_len = std::min(model.config.context_length, 4096);
  cfg.kv_cache_memory = model.config.kv_bytes_per_token(4) * static_cast<uint64_t>(cfg.max_model_len) * 2;
  cfg.runner.n_threads = threads;
  cfg.runner.device = device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
  cfg.runner.one_row_plan_eps = one_row_eps;
  cfg.runner.refine_verification_graphs = !no_verify_refine;
  // CUDA: both engines take their GEMM plans from one fresh plan-cache folder (the first writes what it tuned,
  // the second reads it), so plain and speculative decoding run the same tilings whatever caches $HOME holds: the
  // verification steps reproduce the one-row decode plans' bits (docs/cuda.md, "Verification graphs").
  std::string cache_dir;
  if (cfg.runner.device == DeviceKind::kCuda) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mopt-bench-speculative-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "cannot create a plan-cache folder %s\n", tmpl.c_str());
      return 1;
    }
    cache_dir = tmpl;
    cfg.runner.plan_cache = true;
    cfg.runner.plan_cache_dir = cache_dir;
  }
  EngineConfig scfg = cfg;
  scfg.speculative = sc.value();
  if (draft_layers > 0) {  // a draft model: the target's first draft_layers layers, k from --speculative-config
    if (draft_layers >= model.config.n_layer) {
      std::fprintf(stderr, "--draft-layers %d: the model has %d layers\n", draft_layers, model.config.n_layer);
      return 1;
    }
    auto dm = load_model(model_path);
    if (!dm) {
      std::fprintf(stderr, "draft: %s\n", dm.message().c_str());
      return 1;
    }
    std::shared_ptr<Model> d = std::move(dm).value();
    d->config.n_layer = draft_layers;
    SpeculativeConfig ds;
    ds.method = SpecMethod::kDraftModel;
    ds.num_speculative_tokens = sc->num_speculative_tokens;
    ds.draft = d;
    scfg.speculative = ds;
    spec_json = strfmt("draft model: the first %d of %d layers, k %d", draft_layers, model.config.n_layer,
                       ds.num_speculative_tokens);
  }
  const bool ngram = scfg.speculative.method == SpecMethod::kNgram;
  if (!ngram && !row_costs.empty()) {
    std::fprintf(stderr, "--row-costs models the n-gram proposer; it does not apply to a draft model\n");
    return 1;
  }
  std::unique_ptr<Engine> engines[2];
  for (int i = 0; i < 2; ++i) {
    auto e = Engine::create(model, tok, i ? scfg : cfg);
    if (!e) {
      std::fprintf(stderr, "engine: %s\n", e.message().c_str());
      return 1;
    }
    engines[i] = std::move(e).value();
    auto w = engines[i]->warmup([](int, int, const std::string&) {});
    if (!w) {
      std::fprintf(stderr, "warm-up: %s\n", w.message().c_str());
      return 1;
    }
  }
  std::printf("speculative decoding: %s on %s (threads %d), %s, %d prompt lines, %d tokens, best of %d\n",
              model_path.c_str(), device_name(engines[0]->config().runner.device), threads, spec_json.c_str(), lines,
              tokens, rounds);
  if (cfg.runner.device == DeviceKind::kCuda)
    std::printf("CUDA plans: one-row plan eps %s, verification graphs refined in the graph: %s\n",
                one_row_eps < 0.f ? "default" : strfmt("%g", static_cast<double>(one_row_eps)).c_str(),
                no_verify_refine ? "no" : "yes");
  // ms/step: decode time over the steps after the first token's (plain: one token a step; speculative: a
  // verification step scores up to num_speculative_tokens + 1 positions).
  std::printf("%-14s %7s %7s %12s %12s %9s %10s %9s %14s\n", "file", "prompt", "output", "plain tok/s", "spec tok/s",
              "speed-up", "accept len", "accepted", "ms/step p | s");
  double plain_s = 0, spec_s = 0;
  uint64_t plain_n = 0, spec_n = 0, drafts = 0, draft_tokens = 0, accepted = 0;
  StepPhaseSeconds phase[2];  // plain, speculative: summed over the files' best runs
  uint64_t steps[2] = {0, 0}, verify_steps = 0;
  int mismatches = 0;
  std::vector<std::pair<std::string, Replay>> replays;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> texts;  // prompt and plain output per file
  for (const auto& [name, mod] : split_modules(eval_path)) {
    std::string file;
    for (int i = 0; i < lines && i < static_cast<int>(mod.size()); ++i) file += mod[static_cast<size_t>(i)] + "\n";
    const std::string text =
        "# " + name + ".py\n" + file + "\n\n# The same file, rewritten:\n# " + name + ".py\n" + mod[0] + "\n";
    const std::vector<int32_t> prompt = tok.encode(text, false, false);
    Run best[2];
    std::vector<int32_t> first[2];  // each engine's round-1 output
    for (int r = 0; r < rounds; ++r) {
      Run x[2];
      for (int i = 0; i < 2; ++i) x[i] = generate(*engines[i], prompt, tokens);
      // Same round, same prefix-cache state: the outputs must be equal.
      if (x[0].tokens != x[1].tokens) {
        ++mismatches;
        std::fprintf(stderr, "%s, round %d: the speculative output differs from the plain greedy output at "
                     "token %zu of %zu\n", name.c_str(), r + 1, first_difference(x[0].tokens, x[1].tokens),
                     x[0].tokens.size());
      }
      for (int i = 0; i < 2; ++i) {
        if (r == 0) first[i] = x[i].tokens;
        else if (x[i].tokens != first[i])
          std::fprintf(stderr, "%s, round %d: the %s output differs from round 1's at token %zu (prompt prefix "
                       "from the prefix cache: a shorter prefill, other roundings)\n", name.c_str(), r + 1,
                       i ? "speculative" : "plain", first_difference(x[i].tokens, first[i]));
        if (r == 0 || x[i].decode_tps() > best[i].decode_tps()) best[i] = std::move(x[i]);
      }
    }
    const Run& p = best[0];
    const Run& s = best[1];
    const Replay rp = ngram ? replay_ngram(prompt, s.tokens, scfg.speculative, tokens) : Replay{};
    if (ngram && (rp.drafts != s.drafts || rp.draft_tokens != s.draft_tokens || rp.accepted != s.accepted)) {
      ++mismatches;
      std::fprintf(stderr, "%s: the engine proposed %llu drafts of %llu tokens and accepted %llu; replaying its "
                   "output gives %llu, %llu, %llu\n", name.c_str(), static_cast<unsigned long long>(s.drafts),
                   static_cast<unsigned long long>(s.draft_tokens), static_cast<unsigned long long>(s.accepted),
                   static_cast<unsigned long long>(rp.drafts), static_cast<unsigned long long>(rp.draft_tokens),
                   static_cast<unsigned long long>(rp.accepted));
    }
    replays.push_back({name, rp});
    texts.push_back({prompt, p.tokens});
    std::printf("%-14s %7zu %7zu %12.1f %12.1f %8.2fx %10.2f %8.0f%% %6.2f | %5.2f\n", name.c_str(), prompt.size(),
                p.tokens.size(), p.decode_tps(), s.decode_tps(), s.decode_tps() / p.decode_tps(),
                s.drafts ? 1.0 + static_cast<double>(s.accepted) / s.drafts : 1.0,
                s.draft_tokens ? 100.0 * s.accepted / s.draft_tokens : 0.0,
                1e3 * p.decode_s / std::max<double>(1, p.steps - 1),
                1e3 * s.decode_s / std::max<double>(1, s.steps - 1));
    plain_s += p.decode_s;
    spec_s += s.decode_s;
    plain_n += p.tokens.size() - 1;
    spec_n += s.tokens.size() - 1;
    drafts += s.drafts;
    draft_tokens += s.draft_tokens;
    accepted += s.accepted;
    for (int i = 0; i < 2; ++i) {
      phase[i].propose += best[i].phase.propose;
      phase[i].schedule += best[i].phase.schedule;
      phase[i].forward += best[i].phase.forward;
      phase[i].output += best[i].phase.output;
      phase[i].forward_verify += best[i].phase.forward_verify;
      steps[i] += best[i].decode_steps;
    }
    verify_steps += s.verify_steps;
  }
  const double ptps = plain_n / plain_s, stps = spec_n / spec_s;
  std::printf("%-14s %7s %7llu %12.1f %12.1f %8.2fx %10.2f %8.0f%%\n", "all", "",
              static_cast<unsigned long long>(plain_n), ptps, stps, stps / ptps,
              drafts ? 1.0 + static_cast<double>(accepted) / drafts : 1.0,
              draft_tokens ? 100.0 * accepted / draft_tokens : 0.0);
  std::printf("single-stream decode speed-up with speculation: %.2fx (mean acceptance length %.2f tokens per "
              "verification round; target on the H200: >= 1.8x)\n", stps / ptps,
              drafts ? 1.0 + static_cast<double>(accepted) / drafts : 1.0);
  // The proposer alone (replayed on the outputs, above): how often a step had a proposal, and the tokens a step
  // yields; speed-up = tokens a step / (verification steps' share x their cost relative to a one-token step + the
  // rest's share).
  if (ngram) {
    std::printf("proposer, replayed on the speculative runs' outputs: %-12s %9s %12s %14s\n", "file", "proposals",
                "accept len", "tokens a step");
    const auto print_replay = [](const std::string& n, const Replay& x) {
      std::printf("%51s %-12s %8.0f%% %12.2f %14.2f\n", "", n.c_str(),
                  100.0 * x.drafts / std::max<uint64_t>(1, x.steps),
                  x.drafts ? 1.0 + static_cast<double>(x.accepted) / x.drafts : 1.0,
                  static_cast<double>(x.tokens) / std::max<uint64_t>(1, x.steps));
    };
    Replay all;
    for (const auto& [name, r] : replays) {
      print_replay(name, r);
      all.steps += r.steps;
      all.tokens += r.tokens;
      all.drafts += r.drafts;
      all.draft_tokens += r.draft_tokens;
      all.accepted += r.accepted;
    }
    print_replay("all", all);
  }
  // Where a decode step's time goes (the best runs' steps without prompt tokens), and the forward pass of the
  // steps that verified a proposal apart from the others (no n-gram match: one token decoded).
  for (int i = 0; i < 2; ++i) {
    const double n = static_cast<double>(std::max<uint64_t>(1, steps[i]));
    const StepPhaseSeconds& ph = phase[i];
    std::printf("%-11s %5llu decode steps; us per step: propose %6.1f, schedule %6.1f, forward %6.1f, outputs %6.1f",
                i ? "speculative" : "plain", static_cast<unsigned long long>(steps[i]), 1e6 * ph.propose / n,
                1e6 * ph.schedule / n, 1e6 * ph.forward / n, 1e6 * ph.output / n);
    if (i == 1 && verify_steps > 0)
      std::printf("; forward of the %llu verification steps %.1f, of the other %llu %.1f",
                  static_cast<unsigned long long>(verify_steps), 1e6 * ph.forward_verify / verify_steps,
                  static_cast<unsigned long long>(steps[1] - verify_steps),
                  1e6 * (ph.forward - ph.forward_verify) / std::max<uint64_t>(1, steps[1] - verify_steps));
    std::printf("\n");
  }
  if (mismatches) std::fprintf(stderr, "%d runs: speculative output != plain output\n", mismatches);
  if (ngram && !row_costs.empty())
    print_cost_model(texts, scfg.speculative, tokens, row_costs, "--row-costs");
  std::vector<double> measured;
  const bool profiled = !profile || profile_steps(model, scfg, profile_pos, measured);
  if (ngram && profile && profiled && !measured.empty())
    print_cost_model(texts, scfg.speculative, tokens, measured, "the profile's step times");
  if (!cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(cache_dir, ec);
  }
  return mismatches || !profiled ? 1 : 0;
}
