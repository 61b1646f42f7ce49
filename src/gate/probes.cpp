#include "gate/probes.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/strfmt.h"
#include "loadgen/net.h"
#include "tune/server_process.h"

namespace mopt::gate {

using tune::monotonic_s;
using tune::ServerProcess;

namespace {

Result<ServerProcess> start(const ServerSpec& s, const std::string& log_name, const std::vector<std::string>& extra) {
  std::vector<std::string> args = s.args;
  args.insert(args.end(), extra.begin(), extra.end());
  return ServerProcess::spawn({s.binary, args, s.log_dir + "/" + log_name, {}});
}

// The last non-empty line of a log (what a refusing server printed last).
std::string last_line(const std::string& log) {
  size_t end = log.find_last_not_of("\n ");
  if (end == std::string::npos) return "";
  size_t begin = log.rfind('\n', end);
  return log.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

}  // namespace

Result<RestartTimes> time_restarts(const ServerSpec& s, int n, const tune::LoadPlan& load) {
  RestartTimes out;
  tune::LoadPlan one = load;
  one.load.mode = loadgen::LoadSpec::Mode::kConcurrency;
  one.load.concurrency = 1;
  one.load.num_requests = 1;
  one.load.duration_s = 0;
  one.warmup_requests = 0;
  for (int i = 0; i < n; ++i) {
    MOPT_ASSIGN_OR_RETURN(ServerProcess p, start(s, strfmt("restart-%d.server.log", i + 1), {}));
    if (Status st = p.wait_ready(s.startup_timeout_s); !st) return st.with_context(strfmt("restart %d", i + 1));
    out.ready_s.push_back(monotonic_s() - p.spawn_time_s());
    // The first completion: retried until one succeeds (a server may answer 503 while it finishes starting).
    for (;;) {
      tune::DriveOptions d;
      d.monitor = false;  // nothing but the request itself between start and answer
      auto r = tune::drive(p.host(), p.port(), one, loadgen::SloSpec{}, d);
      if (r && r->summary.completed > r->summary.failed) break;
      if (monotonic_s() - p.spawn_time_s() > s.startup_timeout_s)
        return error("restart %d: no successful completion within %.0f s (%s)", i + 1, s.startup_timeout_s,
                     r ? (r->phase.records.empty() ? "no request" : r->phase.records[0].error_message.c_str())
                       : r.message().c_str());
      if (!p.alive()) return error("restart %d: the server ended (%s)", i + 1, p.exit_info().describe().c_str());
    }
    out.seconds.push_back(monotonic_s() - p.spawn_time_s());
    p.stop(10);
  }
  return out;
}

Result<SoakResult> run_soak(const ServerSpec& s, const tune::LoadPlan& load, double interval_s,
                            loadgen::ProgressPrinter::Style progress, bool sample_gpu) {
  MOPT_ASSIGN_OR_RETURN(ServerProcess p, start(s, "soak.server.log", {}));
  SoakResult out;
  out.server_log = p.log_path();
  MOPT_TRY(p.wait_ready(s.startup_timeout_s).with_context("soak"));

  // The sampler: RSS from /proc, device memory from /metrics, from the start of the measured phase.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, started = false;
  double t0 = 0;
  std::thread sampler([&] {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return started || stop; });
    while (!stop) {
      lk.unlock();
      MemorySample m;
      m.t_s = monotonic_s() - t0;
      auto mem = tune::process_memory(p.pid());
      if (auto h = loadgen::http_get(p.host(), p.port(), "/metrics", 2.0); h && h->status == 200)
        if (auto snap = loadgen::parse_prometheus(h->body)) {
          bool found = false;  // summed over label sets (model_name)
          const double v = snap->sum("mopt:device_memory_used_bytes", &found);
          if (found) m.device_bytes = v;
        }
      lk.lock();
      if (mem) {
        m.rss_bytes = static_cast<double>(mem->rss);
        m.anon_bytes = static_cast<double>(mem->anon);
        out.samples.push_back(m);
        out.peak_rss_bytes = std::max(out.peak_rss_bytes, m.rss_bytes);
      }
      cv.wait_for(lk, std::chrono::duration<double>(interval_s), [&] { return stop; });
    }
  });
  tune::DriveOptions d;
  d.progress = progress;
  d.progress_label = "soak";
  d.sample_gpu = sample_gpu;
  d.on_measure_start = [&] {
    std::lock_guard<std::mutex> lk(mu);
    t0 = monotonic_s();
    started = true;
    cv.notify_all();
  };
  auto run = tune::drive(p.host(), p.port(), load, loadgen::SloSpec{}, d);
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  sampler.join();
  if (auto h = loadgen::http_get(p.host(), p.port(), "/metrics", 5.0); h && h->status == 200)
    if (auto snap = loadgen::parse_prometheus(h->body)) {
      out.final_metrics = std::move(*snap);
      out.metrics_ok = true;
    }
  const bool died = !p.alive();
  p.stop(30);
  if (died)
    return error("the server ended during the soak (%s); its log ends with:\n%s", p.exit_info().describe().c_str(),
                 p.log_tail(1500).c_str());
  if (!run) return run.status().with_context("soak");
  out.run = std::move(*run);
  return out;
}

RefusalResult expect_refusal(const ServerSpec& s, const std::vector<std::string>& extra) {
  RefusalResult r;
  auto p = start(s, "refusal.server.log", extra);
  if (!p) {
    r.outcome = "could not start the process: " + p.message();
    return r;
  }
  const Status st = p->wait_ready(s.startup_timeout_s);
  const double took = monotonic_s() - p->spawn_time_s();
  if (st) {
    r.outcome = strfmt("it started and answered /health after %.1f s", took);
    p->stop(10);
    return r;
  }
  const tune::ExitInfo& e = p->exit_info();
  if (!e.exited) {
    p->stop(10);
    r.outcome = strfmt("it neither served nor exited within %.0f s", s.startup_timeout_s);
    return r;
  }
  r.refused = e.signal == 0 && e.code != 0;
  r.outcome = strfmt("%s after %.1f s: %s", e.describe().c_str(), took, last_line(p->log_tail(4000)).c_str());
  return r;
}

}  // namespace mopt::gate
