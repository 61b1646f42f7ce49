#include "plan/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/membw.h"
#include "core/thread_pool.h"
#include "doctor/gpu_facts.h"
#include "doctor/host_files.h"
#include "plan/gpu_specs.h"

namespace mopt::plan {
namespace {

// Of a GPU's datasheet memory bandwidth, the part a kernel attains (a device-to-device copy, the decode roofline's
// yardstick): measured on an H200 (docs/doctor.md, "Plan against the engine"); applied to every GPU of the table.
constexpr double kAttainedBandwidth = 0.886;

// Buffer of the bandwidth probe: well past the last-level cache.
constexpr size_t kBandwidthProbeBytes = size_t{128} << 20;

// fp32 FLOP/s of the CPU backend's packed product (what its prefill runs), best of a few short runs.
double measure_cpu_flops(ThreadPool& pool) {
  constexpr int64_t N = 1024, K = 1024, M = 128;
  std::vector<float> w(static_cast<size_t>(N * K), 0.5f), x(static_cast<size_t>(M * K), 0.25f),
      y(static_cast<size_t>(M * N));
  const cpu::PackSource src[] = {{w.data(), N, K}};
  const cpu::PackedF32 packed = cpu::pack_f32(src);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::matmul_packed(packed, x.data(), M, y.data(), &pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * N * K * M / s);
  }
  return best;
}

}  // namespace

Result<Hardware> gpu_from_table(const std::string& name) {
  const GpuSpec* s = find_gpu_spec(name);
  if (!s) return error("unknown GPU '%s': the built-in table has %s", name.c_str(), gpu_spec_names().c_str());
  Hardware h;
  h.device = DeviceKind::kCuda;
  h.name = s->name;
  h.source = "built-in table; bandwidth 88.6% of the datasheet's (attained by a copy)";
  h.memory_bytes = static_cast<uint64_t>(s->memory_bytes);
  h.bandwidth = s->bandwidth * kAttainedBandwidth;
  h.flops = s->bf16_flops;
  h.fp8_flops = s->fp8_flops;
  return h;
}

Result<Hardware> detected_gpu(int index) {
  const doctor::GpuSystem sys = doctor::collect_gpu_system();
  if (index < 0 || static_cast<size_t>(index) >= sys.gpus.size())
    return error("no GPU %d detected (%zu found%s)", index, sys.gpus.size(),
                 sys.driver.nvml_load_error.empty() ? "" : (": " + sys.driver.nvml_load_error).c_str());
  const doctor::GpuFacts& g = sys.gpus[static_cast<size_t>(index)];
  Hardware h;
  h.device = DeviceKind::kCuda;
  h.name = g.name;
  h.source = "NVML";
  h.memory_bytes = g.mem_total.value_or(0);
  h.used_by_others = g.mem_used.value_or(0);
  if (const GpuSpec* s = find_gpu_spec(g.name)) {
    h.bandwidth = s->bandwidth * kAttainedBandwidth;
    h.flops = s->bf16_flops;
    h.fp8_flops = s->fp8_flops;
    h.source += std::string(", speeds of ") + s->name +
                " from the built-in table (bandwidth 88.6% of the datasheet's, attained by a copy)";
  }
  return h;
}

Hardware cpu_host(bool measure) {
  Hardware h;
  h.device = DeviceKind::kCpu;
  h.name = "CPU";
  h.source = measure ? "/proc/meminfo; bandwidth and FLOP/s measured now" : "/proc/meminfo";
  h.memory_bytes = doctor::meminfo_value("MemAvailable").value_or(0);
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  h.cache_bytes = static_cast<uint64_t>(std::max({l3, l2, 0L}));
  if (measure) {
    ThreadPool pool(0);
    h.bandwidth = cpu::measure_read_bandwidth(pool, kBandwidthProbeBytes, 3);
    h.flops = measure_cpu_flops(pool);
  }
  return h;
}

}  // namespace mopt::plan
