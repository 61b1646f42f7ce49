#include "gate/gate.h"

#include <sys/stat.h>

#include <optional>

#include "core/files.h"
#include "core/strfmt.h"

namespace mopt::gate {

using json = nlohmann::json;

bool GateRun::passed() const {
  for (const auto& g : gates)
    if (g.verdict == Verdict::kFail || g.verdict == Verdict::kError || (strict && g.verdict == Verdict::kSkip))
      return false;
  return true;
}

GateRun run_gate(const GateOptions& o) {
  GateRun run;
  run.strict = o.strict;
  mkdir(o.server.log_dir.c_str(), 0755);
  const Thresholds& th = o.thresholds;
  run.config = {{"serve_args", o.server.args},
                {"load", o.load.to_json()},
                {"device", o.is_cuda ? "cuda" : "cpu"},
                {"thresholds",
                 {{"leak_mb_per_hour", th.leak_mb_per_hour},
                  {"leak_confidence", th.leak_confidence},
                  {"leak_settle", th.leak_settle},
                  {"tail_p999_s", th.tail_p999_s},
                  {"error_rate", th.error_rate},
                  {"restart_s", th.restart_s},
                  {"restarts", th.restarts},
                  {"accuracy", th.accuracy}}},
                {"memory_limit", o.memory_limit},
                {"baseline", o.baseline},
                {"strict", o.strict},
                {"gates", o.gates.names()}};

  const GateSelection& sel = o.gates;
  std::optional<GateResult> restart;
  if (sel.has("restart")) {
    std::fprintf(stderr, "mopt gate: timing %d restarts\n", th.restarts);
    auto restarts = time_restarts(o.server, th.restarts, o.load);
    restart = restarts ? restart_gate(*restarts, th)
                       : error_result("restart", strfmt("< %g s", th.restart_s), restarts.message());
  }

  std::optional<SoakResult> soak;
  std::vector<GateResult> soak_gates;
  if (sel.needs_soak()) {
    std::fprintf(stderr, "mopt gate: soak of %.0f s at %s\n", o.load.load.duration_s, o.load.load.label().c_str());
    // Under an explicit limit the soak's server runs with it (a cgroup's limit it finds itself).
    ServerSpec soak_server = o.server;
    if (o.memory_limit && !o.is_cuda)
      soak_server.args.insert(soak_server.args.end(), {"--memory-limit", std::to_string(o.memory_limit)});
    auto s = run_soak(soak_server, o.load, o.sample_interval_s, o.progress, o.is_cuda);
    if (s) {
      soak = std::move(*s);
      run.samples = soak->samples;
      json samples = json::array();
      for (const auto& m : soak->samples)
        samples.push_back({{"t_s", m.t_s}, {"rss_bytes", m.rss_bytes}, {"anon_bytes", m.anon_bytes},
                           {"device_bytes", std::isfinite(m.device_bytes) ? json(m.device_bytes) : json(nullptr)}});
      json doc = loadgen::results_json(run.config, {soak->run}, loadgen::SloSpec{});
      doc["tool"] = "mopt gate";
      doc["memory_samples"] = samples;
      if (Status st = write_file(o.server.log_dir + "/soak.json", doc.dump(1)); !st)
        std::fprintf(stderr, "mopt gate: %s\n", st.message().c_str());
      soak_gates = {leak_gate(*soak, th), tail_gate(*soak, th), error_gate(*soak, th),
                    cuda_graph_gate(*soak, o.is_cuda)};
    } else {
      const std::string why = "the soak could not run: " + s.message();
      soak_gates = {error_result("leak", strfmt("< %g MB/h", th.leak_mb_per_hour), why),
                    error_result("tail", strfmt("P99.9 E2E < %g ms", th.tail_p999_s * 1e3), why),
                    error_result("errors", "no failed request", why),
                    error_result("cuda_graphs", "CUDA graphs captured and replayed", why)};
    }
  }
  for (GateResult& g : soak_gates)
    if (sel.has(g.name)) run.gates.push_back(std::move(g));
  if (sel.has("accuracy")) {
    std::fprintf(stderr, "mopt gate: accuracy against %s\n", o.baseline.empty() ? "no baseline" : o.baseline.c_str());
    run.gates.push_back(accuracy_gate(o));
  }
  if (sel.has("resources")) run.gates.push_back(resource_gate(o, soak ? &*soak : nullptr));
  if (restart) run.gates.push_back(std::move(*restart));
  return run;
}

}  // namespace mopt::gate
