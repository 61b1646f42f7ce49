#include "tune/drive.h"

#include <nlohmann/json.hpp>

#include "core/strfmt.h"
#include "loadgen/monitor.h"
#include "loadgen/net.h"

namespace mopt::tune {

using namespace mopt::loadgen;

std::string LoadPlan::describe() const {
  auto wl = Workload::create(workload);
  std::string out = wl ? wl->describe() : std::string("workload ?");
  out += ", " + load.label();
  if (load.num_requests > 0) out += strfmt(", %lld requests", static_cast<long long>(load.num_requests));
  else out += strfmt(", %.0f s", load.duration_s);
  if (warmup_requests > 0) out += strfmt(" (+%d warm-up)", warmup_requests);
  if (ignore_eos) out += ", ignore_eos";
  return out;
}

nlohmann::json LoadPlan::to_json() const {
  auto wl = Workload::create(workload);
  return {{"endpoint", endpoint},
          {"workload", wl ? wl->describe() : "?"},
          {"mode", load.mode == LoadSpec::Mode::kConcurrency ? "concurrency" : "rate"},
          {"concurrency", load.concurrency},
          {"rate", load.rate},
          {"burstiness", load.burstiness},
          {"max_concurrency", load.max_concurrency},
          {"num_requests", load.num_requests},
          {"duration_s", load.duration_s},
          {"warmup_requests", warmup_requests},
          {"seed", load.seed},
          {"ignore_eos", ignore_eos},
          {"request_timeout_s", request_timeout_s}};
}

Result<RunResult> drive(const std::string& host, int port, const LoadPlan& plan, const SloSpec& slo,
                        const DriveOptions& opt) {
  Target t;
  t.host = host;
  t.port = port;
  t.chat = plan.endpoint == "chat";
  t.path = t.chat ? "/v1/chat/completions" : "/v1/completions";
  t.ignore_eos = plan.ignore_eos;
  t.timeout_s = plan.request_timeout_s;
  // The model name requests carry: the first id of GET /v1/models, as OpenAI clients do.
  if (auto m = http_get(host, port, "/v1/models", 10.0); m && m->status == 200) {
    auto j = nlohmann::json::parse(m->body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      t.model = j["data"][0]["id"].get<std::string>();
  }
  if (plan.warmup_requests > 0) {
    WorkloadOptions wo = plan.workload;
    wo.seed = plan.workload.seed + 0x77;
    MOPT_ASSIGN_OR_RETURN(Workload wl, Workload::create(wo));
    LoadSpec w = plan.load;
    w.num_requests = plan.warmup_requests;
    w.duration_s = 0;
    w.seed = plan.load.seed + 0x77;
    ProgressPrinter pp(opt.progress, opt.progress_label + " warm-up");
    auto r = run_phase(t, wl, w, [&](const LiveStats& s) { pp.update(s); });
    pp.finish();
    if (!r) return r.status().with_context("warm-up");
    size_t failed = 0;
    for (const auto& q : r->records) failed += q.ok() ? 0 : 1;
    if (!r->records.empty() && failed == r->records.size())
      return error("every warm-up request failed (%s: %s)", error_kind_name(r->records[0].error),
                   r->records[0].error_message.c_str());
  }
  MOPT_ASSIGN_OR_RETURN(Workload wl, Workload::create(plan.workload));
  RunResult run;
  run.spec = plan.load;
  Monitor mon(host, port, "mopt:", opt.scrape_interval_s, opt.sample_gpu);
  if (opt.on_measure_start) opt.on_measure_start();
  if (opt.monitor) mon.start();
  ProgressPrinter pp(opt.progress, opt.progress_label);
  auto r = run_phase(t, wl, run.spec, [&](const LiveStats& s) { pp.update(s); }, opt.on_record);
  pp.finish();
  if (opt.monitor) run.monitor = mon.stop();
  else run.monitor.metrics_note = "server metrics not collected";
  if (!r) return r.status();
  run.phase = std::move(r).value();
  run.summary = summarize_run(run.phase, run.spec, slo);
  return run;
}

}  // namespace mopt::tune
