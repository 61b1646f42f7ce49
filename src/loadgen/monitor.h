// Server-side observation during a run: periodic /metrics scrapes (Prometheus text; before/after deltas of
// counters and min/mean/max of gauges for metrics with the "mopt:" prefix, or all when none has it) and, when
// the server is on this machine, GPU utilization and memory sampled through NVML (libnvidia-ml.so.1, loaded at
// run time with dlopen; skipped cleanly when absent).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loadgen/prometheus.h"
#include "core/status.h"

namespace mopt::loadgen {

struct GaugeStats {
  double min = 0, max = 0, mean = 0;
  int samples = 0;
};

struct GpuSample {
  double t_s = 0;  // seconds since the monitor started
  int index = 0;
  double util_pct = 0;
  double mem_used_bytes = 0, mem_total_bytes = 0;
};

struct MonitorResult {
  bool metrics_available = false;
  std::string metrics_note;                   // why not, or the scrape count
  std::vector<MetricDelta> deltas;            // counters & histograms, before -> after
  std::map<std::string, GaugeStats> gauges;   // sampled during the run
  std::string gpu_note;                       // "NVML: 1 GPU(s)" or why GPU sampling was skipped
  std::vector<GpuSample> gpu;
  double delta(const std::string& key, bool* found = nullptr) const;
};

// NVML, loaded on demand.
class Nvml {
 public:
  static std::unique_ptr<Nvml> load(std::string* why_not);
  ~Nvml();
  int device_count() const { return count_; }
  bool sample(int index, GpuSample* out);

  struct Fns;

 private:
  Nvml() = default;
  void* lib_ = nullptr;
  std::unique_ptr<Fns> fns_;
  int count_ = 0;
  std::vector<void*> devices_;
};

class Monitor {
 public:
  // host/port: the server; prefix: which metrics to keep ("mopt:"); sample_gpu: try NVML (local servers only).
  Monitor(std::string host, int port, std::string prefix, double interval_s, bool sample_gpu);
  ~Monitor();
  void start();               // scrapes "before" synchronously, then samples on a thread
  MonitorResult stop();       // scrapes "after" synchronously
 private:
  void loop();
  void sample_once();
  std::string host_;
  int port_;
  std::string prefix_;
  double interval_s_;
  bool sample_gpu_;
  std::unique_ptr<Nvml> nvml_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t t0_ = 0;
  MetricsSnapshot before_;
  MonitorResult res_;
  int scrapes_ = 0;
};

}  // namespace mopt::loadgen
