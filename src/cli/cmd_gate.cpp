// mopt gate: the seven production gates for a model and its serving settings at a target load (src/gate;
// docs/gate.md). Exit 0 when every gate passes (or does not apply, unless --strict), 1 when one fails or cannot
// be measured, 2 on bad input.
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "backend/runner.h"
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "core/files.h"
#include "gate/gate.h"
#include "gate/report.h"
#include "loadgen/stats.h"

namespace mopt::cli {
namespace {

struct GateArgs {
  gate::GateOptions o;
  LoadFlags load;
  std::string model, config, device = "auto", thresholds_file, soak = "5m", sample_interval = "1s";
  std::string startup_timeout = "300s", memory_limit, progress = "auto";
  std::string markdown, html, gates;
  std::vector<std::string> serve_args;
  int threads = 0, max_model_len = 0, warmup = -1;
  bool json = false;
};

int fail(const Status& s) {
  std::fprintf(stderr, "mopt gate: error: %s\n", s.message().c_str());
  return 2;
}


int run_gate_cmd(GateArgs& a) {
  gate::GateOptions& o = a.o;
  tune::LoadPlan& plan = o.load;
  if (Status st = resolve_load_flags(a.load, false, plan.load, plan.workload, plan.request_timeout_s); !st)
    return fail(st);
  auto soak = loadgen::parse_duration(a.soak, 1);
  if (!soak || !(*soak > 0)) return fail(error("--soak '%s': expected a duration > 0 (e.g. 5m)", a.soak.c_str()));
  plan.load.duration_s = *soak;
  const int in_flight = plan.load.mode == loadgen::LoadSpec::Mode::kConcurrency ? plan.load.concurrency : 4;
  plan.warmup_requests = a.warmup >= 0 ? a.warmup : std::max(20, 4 * in_flight);
  auto si = loadgen::parse_duration(a.sample_interval, 1);
  if (!si || !(*si >= 0.05)) return fail(error("--sample-interval '%s': expected >= 50ms", a.sample_interval.c_str()));
  o.sample_interval_s = *si;
  auto st = loadgen::parse_duration(a.startup_timeout, 1);
  if (!st || !(*st > 0)) return fail(error("--startup-timeout '%s': expected a duration", a.startup_timeout.c_str()));
  o.server.startup_timeout_s = *st;
  if (!a.memory_limit.empty()) {
    auto m = loadgen::parse_bytes(a.memory_limit);
    if (!m || !(*m > 0)) return fail(error("--memory-limit '%s': expected a size (e.g. 2GiB, 512MiB)", a.memory_limit.c_str()));
    o.memory_limit = static_cast<uint64_t>(*m);
  }
  if (!a.thresholds_file.empty()) {
    std::vector<CLI::ConfigItem> items;
    try {
      items = CLI::ConfigTOML().from_file(a.thresholds_file);
    } catch (const CLI::Error& e) {
      return fail(error("--thresholds %s: %s", a.thresholds_file.c_str(), e.what()));
    }
    for (const auto& item : items) {
      if (item.name == "++" || item.name == "--") continue;
      std::string value;
      for (const auto& v : item.inputs) value += (value.empty() ? "" : ",") + v;
      if (Status s = gate::set_threshold(o.thresholds, item.fullname(), value); !s)
        return fail(s.with_context("--thresholds " + a.thresholds_file));
    }
  }
  using S = loadgen::ProgressPrinter::Style;
  if (a.progress == "auto") o.progress = S::kAuto;
  else if (a.progress == "bar") o.progress = S::kBar;
  else if (a.progress == "lines") o.progress = S::kLines;
  else if (a.progress == "off") o.progress = S::kOff;
  else return fail(error("--progress must be auto, bar, lines or off"));
  if (!o.baseline.empty() && o.eval_text.empty())
    return fail(error("--baseline needs --eval-text FILE (the text both models are evaluated on)"));
  if (!a.gates.empty()) {
    auto sel = gate::parse_gate_selection(a.gates);
    if (!sel) return fail(sel.status());
    o.gates = *sel;
    // Asked for by name, the accuracy gate must be measurable (by default it is a skip without a baseline).
    if (o.gates.has("accuracy") && o.baseline.empty())
      return fail(error("--gates accuracy needs --baseline MODEL and --eval-text FILE (the reference model and the "
                        "text both are evaluated on)"));
  }

  const std::string device = a.device == "auto" ? device_name(resolve_device(DeviceKind::kAuto)) : a.device;
  o.is_cuda = device == "cuda";
  o.model = a.model;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  o.server.binary = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  o.server.args = {"--model", a.model, "--device", device};
  if (!a.config.empty()) o.server.args.insert(o.server.args.end(), {"--config", a.config});
  if (a.threads > 0) o.server.args.insert(o.server.args.end(), {"--threads", std::to_string(a.threads)});
  if (a.max_model_len > 0) o.server.args.insert(o.server.args.end(), {"--max-model-len", std::to_string(a.max_model_len)});
  o.server.args.insert(o.server.args.end(), a.serve_args.begin(), a.serve_args.end());

  const gate::GateRun run = gate::run_gate(o);
  if (a.json) std::fputs(gate::report_json(run).c_str(), stdout);
  else std::fputs(("\n" + gate::report_table(run)).c_str(), stdout);
  if (!a.markdown.empty())
    if (Status s = write_file(a.markdown, gate::report_markdown(run)); !s) return fail(s);
  if (!a.html.empty())
    if (Status s = write_file(a.html, gate::report_html(run)); !s) return fail(s);
  if (Status s = write_file(o.server.log_dir + "/gate.json", gate::report_json(run)); !s) return fail(s);
  return run.passed() ? 0 : 1;
}

Registration reg("gate", 86, [](CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  gate::GateOptions& o = a->o;
  auto* sub = app.add_subcommand("gate", "Production gates: leak, tail latency, errors, CUDA graphs, accuracy, "
                                         "resource limits, restart time");
  sub->add_option("-m,--model", a->model, "The model to serve (GGUF, Hugging Face folder)")->required();
  sub->add_option("--config", a->config, "serve's settings (a TOML file, e.g. mopt tune's best.toml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--device", a->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "CPU threads of the server (0: serve's default)")->check(CLI::Range(0, 4096));
  sub->add_option("--max-model-len", a->max_model_len, "Context limit of the server (0: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--serve-arg", a->serve_args, "One more argument for every server (repeat; e.g. --serve-arg=--max-num-seqs=8)");
  sub->add_option("--endpoint", o.load.endpoint, "completions or chat")->capture_default_str();
  sub->add_flag("--ignore-eos", o.load.ignore_eos, "Every request generates its max_tokens");
  add_load_flags(sub, a->load, o.load.load, o.load.workload, RunLength::kNone);
  sub->add_option("--soak", a->soak, "How long the target load runs after the warm-up")->capture_default_str();
  sub->add_option("--warmup", a->warmup, "Warm-up requests before the soak (default: 4 x concurrency, at least 20)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--sample-interval", a->sample_interval, "Memory samples during the soak")->capture_default_str();
  sub->add_option("--thresholds", a->thresholds_file, "TOML file overriding thresholds (docs/gate.md lists the keys)")
      ->check(CLI::ExistingFile);
  sub->add_option("--memory-limit", a->memory_limit, "Memory the server must fit in (default: the cgroup limit)");
  sub->add_option("--baseline", o.baseline, "Accuracy: the reference model the served one is compared with");
  sub->add_option("--eval-text", o.eval_text, "Accuracy: the text both models are evaluated on")->check(CLI::ExistingFile);
  sub->add_option("--startup-timeout", a->startup_timeout, "A server must be ready within this")->capture_default_str();
  sub->add_option("--gates", a->gates, "Only these gates, comma-separated (default: all): leak, tail, errors, "
                                      "cuda_graphs, accuracy, resources, restart; e.g. --gates accuracy checks a "
                                      "variant against --baseline without a soak");
  sub->add_flag("--strict", o.strict, "A gate that does not apply here (skip) fails the run");
  sub->add_option("-o,--output-dir", o.server.log_dir, "Server logs, soak evidence (soak.json) and gate.json")
      ->capture_default_str();
  sub->add_flag("--json", a->json, "Print the report as JSON instead of a table");
  sub->add_option("--markdown", a->markdown, "Also write the report as Markdown here");
  sub->add_option("--html", a->html, "Also write the report as a self-contained HTML page here");
  sub->add_option("--progress", a->progress, "Soak progress: auto, bar, lines or off")->capture_default_str();
  o.server.log_dir = "gate-results";
  sub->callback([a] { set_exit_code(run_gate_cmd(*a)); });
});

}  // namespace
}  // namespace mopt::cli
