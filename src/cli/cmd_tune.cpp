// mopt tune: searches serve's settings for the highest goodput under an SLA and writes them as a TOML file for
// `mopt serve --config` (src/tune; docs/tune.md).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/load_flags.h"
#include "loadgen/stats.h"
#include "tune/tune.h"

namespace mopt::cli {
namespace {

struct TuneArgs {
  tune::TuneOptions o;
  LoadFlags load;
  std::vector<std::string> search;
  std::string time_budget, startup_timeout = "180s", trial_timeout = "10m", progress = "auto";
  int warmup = -1;
  bool no_confirm = false;
  int confirm_runs = 1;
  int finalists = 1;
};

int fail(const Status& s) {
  std::fprintf(stderr, "mopt tune: error: %s\n", s.message().c_str());
  return 1;
}

// The path of this executable: trials start it again as `mopt serve`.
std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

Result<double> seconds_flag(const std::string& flag, const std::string& text) {
  auto d = loadgen::parse_duration(text, 1);
  if (!d || !(*d > 0)) return error("%s '%s': expected a duration > 0 (e.g. 90s, 10m)", flag.c_str(), text.c_str());
  return *d;
}

Result<loadgen::ProgressPrinter::Style> progress_style(const std::string& s) {
  using S = loadgen::ProgressPrinter::Style;
  if (s == "auto") return S::kAuto;
  if (s == "bar") return S::kBar;
  if (s == "lines") return S::kLines;
  if (s == "off") return S::kOff;
  return error("--progress must be auto, bar, lines or off");
}

int run_tune_cmd(TuneArgs& a) {
  tune::TuneOptions& o = a.o;
  tune::LoadPlan& plan = o.trial.load;
  if (Status st = resolve_load_flags(a.load, false, plan.load, plan.workload, plan.request_timeout_s); !st)
    return fail(st);
  if (plan.endpoint != "completions" && plan.endpoint != "chat")
    return fail(error("--endpoint must be completions or chat (got '%s')", plan.endpoint.c_str()));
  const int in_flight = plan.load.mode == loadgen::LoadSpec::Mode::kConcurrency ? plan.load.concurrency : 4;
  plan.warmup_requests = a.warmup >= 0 ? a.warmup : std::max(4, 2 * in_flight);
  for (const auto& s : a.search) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(error("--search '%s': expected KNOB=V1,V2,... (e.g. max-num-seqs=4,8,16)", s.c_str()));
    o.search.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  if (!a.time_budget.empty()) {
    auto t = seconds_flag("--time-budget", a.time_budget);
    if (!t) return fail(t.status());
    o.time_budget_s = *t;
  }
  if (o.max_trials <= 0 && o.time_budget_s <= 0) o.max_trials = 30;
  auto st = seconds_flag("--startup-timeout", a.startup_timeout);
  if (!st) return fail(st.status());
  o.trial.startup_timeout_s = *st;
  auto tt = seconds_flag("--trial-timeout", a.trial_timeout);
  if (!tt) return fail(tt.status());
  o.trial.trial_timeout_s = *tt;
  auto style = progress_style(a.progress);
  if (!style) return fail(style.status());
  o.trial.progress = *style;
  o.confirm_runs = a.no_confirm ? 0 : a.confirm_runs;
  o.finalists = a.finalists;
  // best.toml must work from any directory: absolute model paths.
  for (auto& m : o.models) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(m, ec);
    if (!ec) m = abs.lexically_normal().string();
  }
  o.trial.binary = self_path();
  o.trial.sample_gpu = o.fixed.device != "cpu";
  auto out = tune::run_tune(o);
  if (!out) return fail(out.status());
  const tune::TuneReport& r = out->report;
  std::printf("\n%s\n", tune::report_table(r).c_str());
  std::printf("search: %s\n", r.stop_reason.c_str());
  if (!out->found) {
    std::printf("no trial met the SLA %s; see %s/report.html (relax the SLA, lower the load, or widen --search)\n",
                r.sla.to_string().c_str(), o.trial.out_dir.c_str());
    return 2;
  }
  std::printf("winner: %s\n", r.margin.c_str());
  if (!r.reproduced.empty()) std::printf("re-run: %s\n", r.reproduced.c_str());
  std::printf("wrote %s (mopt serve --config %s), %s/report.html, report.svg, report.md, trials.jsonl, trials/\n",
              r.toml_path.c_str(), r.toml_path.c_str(), o.trial.out_dir.c_str());
  return 0;
}

Registration reg("tune", 85, [](CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  tune::TuneOptions& o = a->o;
  auto* sub = app.add_subcommand("tune", "Search serve's settings for the highest goodput under an SLA");
  sub->add_option("-m,--model", o.models, "Model (GGUF, Hugging Face folder); repeat for variants of one model "
                                          "(weight formats, e.g. -m llama-bf16 -m llama-fp8): the first is serve's "
                                          "defaults' model, the others are searched as the model knob")
      ->required();
  sub->add_option("--device", o.fixed.device, "auto, cpu or cuda (every trial)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  sub->add_option("--threads", o.fixed.threads, "CPU threads of every trial's server (0: serve's default)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--max-model-len", o.fixed.max_model_len, "Context limit of every trial's server (0: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--endpoint", o.trial.load.endpoint, "completions or chat")->capture_default_str();
  sub->add_flag("--ignore-eos", o.trial.load.ignore_eos, "Every request generates its max_tokens");
  add_load_flags(sub, a->load, o.trial.load.load, o.trial.load.workload, RunLength::kCount);
  sub->add_option("--warmup", a->warmup, "Warm-up requests per trial (default: 2 x concurrency, at least 4)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--slo", o.slo, "SLA a trial must meet, e.g. ttft_p99=500ms,tpot_p99=50ms,error_rate=0")
      ->capture_default_str();
  sub->add_option("--trials", o.max_trials, "Most trials, the defaults and the re-runs included "
                                            "(default 30 without --time-budget)")->check(CLI::Range(1, 100000));
  sub->add_option("--time-budget", a->time_budget, "Start no search trial after this long (e.g. 10m)");
  sub->add_option("--search", a->search, "KNOB=V1,V2,...: the values to try (one value fixes the knob); knobs: "
                                         "model, max-num-seqs, max-num-batched-tokens, block-size, kv-cache-dtype, "
                                         "prefix-caching, cuda-graphs, kv-cache-memory (model: -m variants by index, path or "
                                         "file name)");
  sub->add_option("--min-gain", o.min_gain, "A move must raise goodput by this fraction")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sub->add_option("--early-stop-ratio", o.trial.worse_ratio,
                  "Stop a trial whose goodput is below this fraction of the best (0: only when its SLA is lost)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  sub->add_option("--startup-timeout", a->startup_timeout, "A trial's server must be ready within this")
      ->capture_default_str();
  sub->add_option("--trial-timeout", a->trial_timeout, "A trial's whole time; then its server is killed")
      ->capture_default_str();
  sub->add_option("-o,--output-dir", o.trial.out_dir, "Where best.toml, the reports and the trial log go")
      ->capture_default_str();
  sub->add_flag("--resume", o.resume, "Continue the study logged in the output directory");
  sub->add_option("--confirm-runs", a->confirm_runs,
                  "At the end, re-run the winner and serve's defaults this many times each, alternately (medians "
                  "compared)")->check(CLI::Range(0, 100))->capture_default_str();
  sub->add_flag("--no-confirm", a->no_confirm, "No re-runs at the end (--confirm-runs 0)");
  sub->add_option("--finalists", a->finalists,
                  "Re-run this many best trials --confirm-runs times each and pick the winner by their re-runs' "
                  "medians (1: the search's best)")->check(CLI::Range(1, 20))->capture_default_str();
  sub->add_option("--progress", a->progress, "Each trial's load progress: auto, bar, lines or off")
      ->capture_default_str();
  o.trial.out_dir = "tune-results";
  o.trial.load.load.num_requests = 200;
  sub->callback([a] { set_exit_code(run_tune_cmd(*a)); });
});

}  // namespace
}  // namespace mopt::cli
