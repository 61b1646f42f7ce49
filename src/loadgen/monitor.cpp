#include "loadgen/monitor.h"

#include <dlfcn.h>

#include <chrono>

#include "loadgen/net.h"

namespace mopt::loadgen {

double MonitorResult::delta(const std::string& key, bool* found) const {
  for (const auto& d : deltas)
    if (d.key == key) {
      if (found) *found = true;
      return d.after - d.before;
    }
  if (found) *found = false;
  return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// NVML through dlopen: only the handful of entry points we need, declared with NVML's C ABI.

namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
}  // namespace

struct Nvml::Fns {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*count)(unsigned int*);
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*util)(nvmlDevice_t, NvmlUtilization*);
  nvmlReturn_t (*mem)(nvmlDevice_t, NvmlMemory*);
};

std::unique_ptr<Nvml> Nvml::load(std::string* why_not) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why_not = "GPU sampling skipped: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
    return nullptr;
  }
  auto fns = std::make_unique<Fns>();
  auto sym = [&](const char* a, const char* b) {
    void* p = dlsym(lib, a);
    return p ? p : (b ? dlsym(lib, b) : nullptr);
  };
  fns->init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2", "nvmlInit"));
  fns->shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown", nullptr));
  fns->count = reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"));
  fns->handle = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(
      sym("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"));
  fns->util = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlUtilization*)>(
      sym("nvmlDeviceGetUtilizationRates", nullptr));
  fns->mem = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo", nullptr));
  if (!fns->init || !fns->shutdown || !fns->count || !fns->handle || !fns->util || !fns->mem) {
    dlclose(lib);
    *why_not = "GPU sampling skipped: libnvidia-ml.so.1 lacks expected entry points";
    return nullptr;
  }
  if (int rc = fns->init(); rc != 0) {
    dlclose(lib);
    *why_not = strfmt("GPU sampling skipped: nvmlInit failed (NVML error %d)", rc);
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->lib_ = lib;
  n->fns_ = std::move(fns);
  unsigned int count = 0;
  if (n->fns_->count(&count) != 0) count = 0;
  for (unsigned int i = 0; i < count && i < 64; ++i) {
    nvmlDevice_t d = nullptr;
    if (n->fns_->handle(i, &d) == 0) n->devices_.push_back(d);
  }
  n->count_ = static_cast<int>(n->devices_.size());
  if (n->count_ == 0) *why_not = "GPU sampling skipped: NVML reports no GPU";
  return n;
}

Nvml::~Nvml() {
  if (fns_) fns_->shutdown();
  if (lib_) dlclose(lib_);
}

bool Nvml::sample(int index, GpuSample* out) {
  if (index < 0 || index >= count_) return false;
  NvmlUtilization u{};
  NvmlMemory m{};
  if (fns_->util(devices_[static_cast<size_t>(index)], &u) != 0) return false;
  if (fns_->mem(devices_[static_cast<size_t>(index)], &m) != 0) return false;
  out->index = index;
  out->util_pct = u.gpu;
  out->mem_used_bytes = static_cast<double>(m.used);
  out->mem_total_bytes = static_cast<double>(m.total);
  return true;
}

// ---------------------------------------------------------------------------------------------------------------

Monitor::Monitor(std::string host, int port, std::string prefix, double interval_s, bool sample_gpu)
    : host_(std::move(host)), port_(port), prefix_(std::move(prefix)), interval_s_(interval_s), sample_gpu_(sample_gpu) {}

Monitor::~Monitor() {
  if (thread_.joinable()) stop();
}

namespace {
Result<MetricsSnapshot> scrape(const std::string& host, int port) {
  auto r = http_get(host, port, "/metrics", 5.0);
  if (!r) return r.status();
  if (r->status != 200) return error("GET /metrics answered HTTP %d", r->status);
  return parse_prometheus(r->body);
}
}  // namespace

void Monitor::start() {
  t0_ = now_ns();
  auto b = scrape(host_, port_);
  if (b) {
    before_ = std::move(b).value();
    res_.metrics_available = true;
  } else {
    res_.metrics_note = "server metrics not collected: " + b.message();
  }
  if (sample_gpu_) {
    nvml_ = Nvml::load(&res_.gpu_note);
    if (nvml_ && nvml_->device_count() > 0) res_.gpu_note = strfmt("NVML: %d GPU(s) sampled", nvml_->device_count());
    else nvml_.reset();
  } else {
    res_.gpu_note = "GPU sampling skipped: the server is not on this machine";
  }
  if (res_.metrics_available || nvml_) thread_ = std::thread([this] { loop(); });
}

void Monitor::sample_once() {
  const double t = static_cast<double>(now_ns() - t0_) * 1e-9;
  if (res_.metrics_available) {
    if (auto s = scrape(host_, port_)) {
      ++scrapes_;
      for (const auto& m : s->samples) {
        if (m.type != MetricType::kGauge || m.name.compare(0, prefix_.size(), prefix_) != 0) continue;
        GaugeStats& g = res_.gauges[m.key()];
        if (g.samples == 0) g.min = g.max = m.value;
        g.min = std::min(g.min, m.value);
        g.max = std::max(g.max, m.value);
        g.mean += (m.value - g.mean) / ++g.samples;
      }
    }
  }
  if (nvml_)
    for (int i = 0; i < nvml_->device_count(); ++i) {
      GpuSample g;
      if (nvml_->sample(i, &g)) {
        g.t_s = t;
        res_.gpu.push_back(g);
      }
    }
}

void Monitor::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    lk.unlock();
    sample_once();
    lk.lock();
    cv_.wait_for(lk, std::chrono::duration<double>(interval_s_), [&] { return stop_; });
  }
}

MonitorResult Monitor::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (res_.metrics_available) {
    // Servers may update counters just after the last byte of a stream: scrape until two scrapes 100 ms
    // apart agree on every counter (at most 10 tries).
    auto after = scrape(host_, port_);
    for (int i = 0; i < 10 && after; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto again = scrape(host_, port_);
      if (!again) break;
      bool same = true;
      for (const auto& d : metric_deltas(*after, *again, prefix_))
        if (d.type == MetricType::kCounter && d.before != d.after) same = false;
      after = std::move(again);
      if (same) break;
    }
    if (after) {
      res_.deltas = metric_deltas(before_, *after, prefix_);
      res_.metrics_note = strfmt("%d scrapes, %zu '%s' series", scrapes_ + 2, res_.deltas.size(), prefix_.c_str());
    } else {
      res_.metrics_available = false;
      res_.metrics_note = "final /metrics scrape failed: " + after.message();
    }
  }
  return std::move(res_);
}

}  // namespace mopt::loadgen
