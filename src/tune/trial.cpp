#include "tune/trial.h"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/files.h"
#include "core/strfmt.h"
#include "tune/server_process.h"

namespace mopt::tune {

using json = nlohmann::json;

Score TrialResult::score() const {
  Score s;
  s.valid = measured();
  s.feasible = feasible;
  s.goodput = goodput;
  s.excess = excess;
  return s;
}

json TrialResult::to_json() const {
  json checks_j = json::array();
  for (const auto& c : checks) checks_j.push_back({{"name", c.name}, {"value", c.value}, {"limit", c.limit}, {"met", c.met}});
  return {{"index", index},       {"key", key},
          {"role", role},         {"settings", settings},
          {"serve_args", serve_args}, {"status", status},
          {"detail", detail},     {"feasible", feasible},
          {"goodput", goodput},   {"request_throughput", request_throughput},
          {"output_throughput", output_throughput}, {"ttft_p99", ttft_p99},
          {"tpot_p99", tpot_p99}, {"itl_p99", itl_p99},
          {"e2e_p99", e2e_p99},   {"error_rate", error_rate},
          {"excess", excess},     {"requests", requests},
          {"failed", failed},     {"sla", checks_j},
          {"startup_s", startup_s}, {"seconds", seconds}, {"measured_s", measured_s},
          {"evidence", evidence}, {"server_log", server_log}};
}

Result<TrialResult> TrialResult::from_json(const json& j) {
  try {
    TrialResult t;
    t.index = j.at("index").get<int>();
    t.key = j.at("key").get<std::string>();
    t.role = j.at("role").get<std::string>();
    t.settings = j.at("settings");
    t.serve_args = j.at("serve_args").get<std::vector<std::string>>();
    t.status = j.at("status").get<std::string>();
    t.detail = j.at("detail").get<std::string>();
    t.feasible = j.at("feasible").get<bool>();
    // NaN is written as null by nlohmann::json.
    auto num = [&](const char* k) { return j.at(k).is_null() ? NAN : j.at(k).get<double>(); };
    t.goodput = num("goodput");
    t.request_throughput = num("request_throughput");
    t.output_throughput = num("output_throughput");
    t.ttft_p99 = num("ttft_p99");
    t.tpot_p99 = num("tpot_p99");
    t.itl_p99 = num("itl_p99");
    t.e2e_p99 = num("e2e_p99");
    t.error_rate = num("error_rate");
    t.excess = num("excess");
    t.requests = j.at("requests").get<int64_t>();
    t.failed = j.at("failed").get<int64_t>();
    for (const auto& c : j.at("sla"))
      t.checks.push_back({c.at("name").get<std::string>(), c.at("value").is_null() ? NAN : c.at("value").get<double>(),
                          c.at("limit").get<double>(), c.at("met").get<bool>()});
    t.startup_s = num("startup_s");
    t.seconds = num("seconds");
    t.measured_s = num("measured_s");
    t.evidence = j.at("evidence").get<std::string>();
    t.server_log = j.at("server_log").get<std::string>();
    return t;
  } catch (const json::exception& e) {
    return error("a trial record is malformed: %s", e.what());
  }
}

namespace {

// Memory exhaustion as a server reports it, or a SIGKILL nobody here sent (the kernel's OOM killer).
bool looks_like_oom(const ExitInfo& e, const std::string& log) {
  if (e.exited && e.signal == SIGKILL && !e.killed_by_us) return true;
  for (const char* s : {"out of memory", "bad_alloc", "Cannot allocate memory", "cudaErrorMemoryAllocation",
                        "CUDA_ERROR_OUT_OF_MEMORY"})
    if (log.find(s) != std::string::npos) return true;
  return false;
}

// Kills the server when the trial's time is up.
class Watchdog {
 public:
  Watchdog(ServerProcess& p, double seconds) : thread_([this, &p, seconds] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return done_; })) {
        fired_ = true;
        p.kill_now();
      }
    }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool fired() {
    std::lock_guard<std::mutex> lk(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread thread_;
};

}  // namespace

TrialResult run_trial(const TrialOptions& opt, const Sla& sla, TrialResult t, double best_goodput) {
  const double t0 = monotonic_s();
  const std::string dir = opt.out_dir + "/trials";
  mkdir(opt.out_dir.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  const std::string stem = dir + strfmt("/%03d", t.index);
  t.server_log = stem + ".server.log";
  auto finish = [&](std::string status, std::string detail) {
    t.status = std::move(status);
    t.detail = std::move(detail);
    t.feasible = false;
    t.seconds = monotonic_s() - t0;
    return t;
  };

  auto proc = ServerProcess::spawn({opt.binary, t.serve_args, t.server_log, {}});
  if (!proc) return finish("start_failed", proc.message());
  if (Status st = proc->wait_ready(opt.startup_timeout_s); !st) {
    const bool ended = proc->exit_info().exited;
    proc->stop(5);
    const std::string log = proc->log_tail(1 << 16);
    if (looks_like_oom(proc->exit_info(), log)) return finish("oom", st.message());
    return finish(ended ? "start_failed" : "timeout", st.message());
  }
  t.startup_s = monotonic_s() - proc->spawn_time_s();

  const loadgen::SloSpec slo = sla.per_request();
  EarlyStop stopper(sla, opt.load.load.num_requests, best_goodput, opt.worse_ratio);
  DriveOptions d;
  d.progress = opt.progress;
  d.progress_label = strfmt("trial %d", t.index);
  d.sample_gpu = opt.sample_gpu;
  if (best_goodput >= 0) d.on_record = [&](const loadgen::RequestRecord& r) { return stopper.on_record(r); };
  Result<loadgen::RunResult> run = error("not run");
  bool timed_out = false;
  {
    Watchdog dog(*proc, std::max(1.0, opt.trial_timeout_s - (monotonic_s() - t0)));
    run = drive(proc->host(), proc->port(), opt.load, slo, d);
    timed_out = dog.fired();
  }
  const bool died = !proc->alive();
  const ExitInfo ex = proc->stop(10);
  const std::string log = proc->log_tail(1 << 16);

  if (run) {
    const loadgen::RunSummary& s = run->summary;
    t.goodput = s.goodput;
    t.request_throughput = s.request_throughput;
    t.output_throughput = s.output_throughput;
    t.ttft_p99 = s.ttft.n ? s.ttft.p99 : NAN;
    t.tpot_p99 = s.tpot.n ? s.tpot.p99 : NAN;
    t.itl_p99 = s.itl.n ? s.itl.p99 : NAN;
    t.e2e_p99 = s.e2e.n ? s.e2e.p99 : NAN;
    t.requests = s.completed;
    t.failed = s.failed;
    t.measured_s = s.duration_s;
    t.error_rate = s.completed ? static_cast<double>(s.failed) / static_cast<double>(s.completed) : 0;
    t.checks = sla.check(s);
    t.excess = sla.excess(s);
    json config = {{"tool", "mopt tune"}, {"trial", t.index}, {"serve_args", t.serve_args}, {"load", opt.load.to_json()},
                   {"sla", sla.to_string()}, {"stopped_early", run->phase.stopped_early},
                   {"stop_reason", stopper.reason()}};
    t.evidence = stem + ".json";
    if (Status st = write_file(t.evidence, loadgen::results_json(config, {*run}, slo).dump(1)); !st) t.evidence.clear();
  }
  if (timed_out) return finish("timeout", strfmt("the trial ran over %.0f s (--trial-timeout); the server was killed",
                                                 opt.trial_timeout_s));
  if (died) {
    const std::string why = strfmt("the server ended during the load (%s); its log ends with:\n%s",
                                   ex.describe().c_str(), proc->log_tail(1500).c_str());
    return finish(looks_like_oom(ex, log) ? "oom" : "crashed", why);
  }
  if (!run) return finish("failed", run.message());
  if (run->phase.stopped_early) {
    t.excess = std::max(t.excess, 1.0 + 1e-9);  // a stopped trial never counts as meeting the SLA
    return finish("stopped_early", stopper.reason());
  }
  t.status = "ok";
  t.feasible = sla.met(run->summary);
  t.seconds = monotonic_s() - t0;
  return t;
}

}  // namespace mopt::tune
