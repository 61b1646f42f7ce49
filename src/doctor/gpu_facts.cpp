#include "doctor/gpu_facts.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "doctor/cuda_driver_api.h"
#include "doctor/dynlib.h"
#include "doctor/host_files.h"
#include "doctor/nvml_api.h"

namespace mopt::doctor {
namespace {

// fn(args...) into `out` when the entry point exists and succeeds.
template <class T, class Fn, class... Args>
void read_into(std::optional<T>& out, Fn* fn, Args... args) {
  if (fn && fn(args...) == kNvmlSuccess) return;
  out.reset();
}

template <class Fn, class... Args>
std::optional<unsigned> nvml_uint(Fn* fn, Args... args) {
  unsigned v = 0;
  if (fn && fn(args..., &v) == kNvmlSuccess) return v;
  return std::nullopt;
}

std::optional<bool> nvml_flag(nvmlReturn_t (*fn)(nvmlDevice_t, int*), nvmlDevice_t d) {
  int v = 0;
  if (fn && fn(d, &v) == kNvmlSuccess) return v != 0;
  return std::nullopt;
}

std::optional<uint64_t> ecc_count(const NvmlApi& nv, nvmlDevice_t d, int type, int counter) {
  unsigned long long v = 0;
  if (nv.DeviceGetTotalEccErrors && nv.DeviceGetTotalEccErrors(d, type, counter, &v) == kNvmlSuccess) return v;
  return std::nullopt;
}

std::optional<unsigned> retired_pages(const NvmlApi& nv, nvmlDevice_t d, int cause) {
  if (!nv.DeviceGetRetiredPages) return std::nullopt;
  unsigned n = 0;
  const nvmlReturn_t r = nv.DeviceGetRetiredPages(d, cause, &n, nullptr);  // n = 0: count only
  if (r == kNvmlSuccess || r == kNvmlErrorInsufficientSize) return n;
  return std::nullopt;
}

void read_processes(const NvmlApi& nv, nvmlDevice_t d, GpuFacts& g) {
  std::map<unsigned, GpuProcess> by_pid;
  bool any = false;
  for (auto* fn : {nv.DeviceGetComputeRunningProcesses, nv.DeviceGetGraphicsRunningProcesses}) {
    if (!fn) continue;
    std::vector<nvmlProcessInfo_t> buf(64);
    unsigned n = static_cast<unsigned>(buf.size());
    nvmlReturn_t r = fn(d, &n, buf.data());
    if (r == kNvmlErrorInsufficientSize) {
      buf.resize(n + 16);
      n = static_cast<unsigned>(buf.size());
      r = fn(d, &n, buf.data());
    }
    if (r != kNvmlSuccess) continue;
    any = true;
    for (unsigned i = 0; i < std::min<unsigned>(n, static_cast<unsigned>(buf.size())); ++i) {
      GpuProcess& p = by_pid[buf[i].pid];
      p.pid = buf[i].pid;
      // NVML_VALUE_NOT_AVAILABLE (all ones) where the driver cannot attribute memory (e.g. in containers).
      if (buf[i].usedGpuMemory != ~0ull) p.used_bytes = std::max<uint64_t>(p.used_bytes, buf[i].usedGpuMemory);
    }
  }
  if (!any) return;
  g.processes.emplace();
  for (auto& [pid, p] : by_pid) {
    char name[256] = {0};
    if (nv.SystemGetProcessName && nv.SystemGetProcessName(pid, name, sizeof(name)) == kNvmlSuccess) p.name = name;
    g.processes->push_back(p);
  }
}

std::optional<int> numa_node_of(const std::string& bus_id) {
  if (bus_id.empty()) return std::nullopt;
  // NVML's "00000000:3B:00.0" is sysfs's "0000:3b:00.0".
  std::string s = bus_id.size() > 12 ? bus_id.substr(bus_id.size() - 12) : bus_id;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto v = read_host_int("/sys/bus/pci/devices/" + s + "/numa_node");
  if (!v || *v < 0) return std::nullopt;
  return static_cast<int>(*v);
}

GpuFacts read_gpu(const NvmlApi& nv, nvmlDevice_t d, int index) {
  GpuFacts g;
  g.index = index;
  char buf[256] = {0};
  if (nv.DeviceGetName && nv.DeviceGetName(d, buf, sizeof(buf)) == kNvmlSuccess) g.name = buf;
  buf[0] = 0;
  if (nv.DeviceGetUUID && nv.DeviceGetUUID(d, buf, sizeof(buf)) == kNvmlSuccess) g.uuid = buf;
  nvmlPciInfo_t pci{};
  if (nv.DeviceGetPciInfo && nv.DeviceGetPciInfo(d, &pci) == kNvmlSuccess) g.bus_id = pci.busId;
  if (nv.DeviceGetCudaComputeCapability) nv.DeviceGetCudaComputeCapability(d, &g.cc_major, &g.cc_minor);
  nvmlMemory_t mem{};
  if (nv.DeviceGetMemoryInfo && nv.DeviceGetMemoryInfo(d, &mem) == kNvmlSuccess) {
    g.mem_total = mem.total;
    g.mem_used = mem.used;
    g.mem_free = mem.free;
  }
  read_processes(nv, d, g);
  int cur = 0, pend = 0;
  if (nv.DeviceGetEccMode && nv.DeviceGetEccMode(d, &cur, &pend) == kNvmlSuccess) {
    g.ecc_enabled = cur != 0;
    g.ecc_pending = pend != 0;
    g.ecc_corrected_volatile = ecc_count(nv, d, kNvmlEccCorrected, kNvmlVolatileEcc);
    g.ecc_uncorrected_volatile = ecc_count(nv, d, kNvmlEccUncorrected, kNvmlVolatileEcc);
    g.ecc_corrected_aggregate = ecc_count(nv, d, kNvmlEccCorrected, kNvmlAggregateEcc);
    g.ecc_uncorrected_aggregate = ecc_count(nv, d, kNvmlEccUncorrected, kNvmlAggregateEcc);
  }
  g.retired_sbe = retired_pages(nv, d, kNvmlRetiredMultipleSbe);
  g.retired_dbe = retired_pages(nv, d, kNvmlRetiredDbe);
  g.retired_pending = nvml_flag(nv.DeviceGetRetiredPagesPendingStatus, d);
  unsigned rc = 0, ru = 0, rp = 0, rf = 0;
  if (nv.DeviceGetRemappedRows && nv.DeviceGetRemappedRows(d, &rc, &ru, &rp, &rf) == kNvmlSuccess) {
    g.remapped_correctable = rc;
    g.remapped_uncorrectable = ru;
    g.remap_pending = rp != 0;
    g.remap_failure = rf != 0;
  }
  g.persistence = nvml_flag(nv.DeviceGetPersistenceMode, d);
  g.pcie_gen = nvml_uint(nv.DeviceGetCurrPcieLinkGeneration, d);
  g.pcie_gen_max = nvml_uint(nv.DeviceGetMaxPcieLinkGeneration, d);
  g.pcie_width = nvml_uint(nv.DeviceGetCurrPcieLinkWidth, d);
  g.pcie_width_max = nvml_uint(nv.DeviceGetMaxPcieLinkWidth, d);
  int ps = 0;
  if (nv.DeviceGetPerformanceState && nv.DeviceGetPerformanceState(d, &ps) == kNvmlSuccess && ps <= 15) g.pstate = ps;
  g.clock_sm = nvml_uint(nv.DeviceGetClockInfo, d, kNvmlClockSm);
  g.clock_sm_max = nvml_uint(nv.DeviceGetMaxClockInfo, d, kNvmlClockSm);
  g.clock_mem = nvml_uint(nv.DeviceGetClockInfo, d, kNvmlClockMem);
  g.clock_mem_max = nvml_uint(nv.DeviceGetMaxClockInfo, d, kNvmlClockMem);
  unsigned long long reasons = 0;
  if (nv.DeviceGetClocksEventReasons && nv.DeviceGetClocksEventReasons(d, &reasons) == kNvmlSuccess)
    g.throttle = reasons;
  g.temp_c = nvml_uint(nv.DeviceGetTemperature, d, kNvmlTemperatureGpu);
  g.temp_slowdown_c = nvml_uint(nv.DeviceGetTemperatureThreshold, d, kNvmlTempThresholdSlowdown);
  g.temp_shutdown_c = nvml_uint(nv.DeviceGetTemperatureThreshold, d, kNvmlTempThresholdShutdown);
  g.power_mw = nvml_uint(nv.DeviceGetPowerUsage, d);
  g.power_limit_mw = nvml_uint(nv.DeviceGetEnforcedPowerLimit, d);
  unsigned mc = 0, mp = 0;
  if (nv.DeviceGetMigMode && nv.DeviceGetMigMode(d, &mc, &mp) == kNvmlSuccess) {
    g.mig_current = mc;
    g.mig_pending = mp;
  }
  for (unsigned link = 0; nv.DeviceGetNvLinkState && link < kNvmlNvlinkMaxLinks; ++link) {
    int active = 0;
    if (nv.DeviceGetNvLinkState(d, link, &active) != kNvmlSuccess) break;  // past the GPU's last link
    g.nvlinks_active += active != 0;
  }
  g.numa_node = numa_node_of(g.bus_id);
  return g;
}

void read_driver_nvml(DriverFacts& f, NvmlApi& nv, std::vector<nvmlDevice_t>& devs) {
  f.nvml_loaded = true;
  f.nvml_path = nv.lib.path;
  f.nvml_init = nv.Init();
  if (f.nvml_init != kNvmlSuccess) {
    f.nvml_init_error = nv.error_string(f.nvml_init);
    f.user_version = version_from_library_name(nv.lib.path);
    return;
  }
  char v[96] = {0};
  if (nv.SystemGetDriverVersion && nv.SystemGetDriverVersion(v, sizeof(v)) == kNvmlSuccess) f.user_version = v;
  if (f.user_version.empty()) f.user_version = version_from_library_name(nv.lib.path);
  int cv = 0;
  if (nv.SystemGetCudaDriverVersion && nv.SystemGetCudaDriverVersion(&cv) == kNvmlSuccess) f.nvml_cuda_version = cv;
  unsigned n = 0;
  if (nv.DeviceGetCount(&n) != kNvmlSuccess) return;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    if (nv.DeviceGetHandleByIndex(i, &d) == kNvmlSuccess) devs.push_back(d);
  }
}

void read_driver_cuda(DriverFacts& f) {
  auto cu = load_cuda_driver();
  if (!cu) {
    f.cuda_load_error = cu.message();
    return;
  }
  f.cuda_loaded = true;
  f.cuda_path = cu->lib.path;
  int v = 0;
  if (cu->DriverGetVersion(&v) == kCudaSuccess) f.cuda_version = v;  // works before cuInit
  f.cu_init = cu->Init(0);
  if (f.cu_init != kCudaSuccess) {
    f.cu_init_error = cu->error_string(f.cu_init);
    return;
  }
  int n = 0;
  if (cu->DeviceGetCount(&n) == kCudaSuccess) f.cuda_device_count = n;
}

GpuTopology read_topology(const NvmlApi& nv, const std::vector<nvmlDevice_t>& devs) {
  const size_t n = devs.size();
  GpuTopology t;
  t.level.assign(n, std::vector<int>(n, -1));
  t.nvlink.assign(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      int lvl = -1, st = -1;
      if (nv.DeviceGetTopologyCommonAncestor && nv.DeviceGetTopologyCommonAncestor(devs[i], devs[j], &lvl) == 0)
        t.level[i][j] = lvl;
      if (nv.DeviceGetP2PStatus && nv.DeviceGetP2PStatus(devs[i], devs[j], kNvmlP2pCapsNvlink, &st) == 0)
        t.nvlink[i][j] = st == kNvmlP2pStatusOk;
    }
  return t;
}

template <class T>
nlohmann::ordered_json opt(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

// A fact reported with its maximum (PCIe link, clocks): "<name>" and "<name>_max".
struct WithMax {
  const char* name;
  std::optional<unsigned> value, max;
};
nlohmann::ordered_json with_max(std::initializer_list<WithMax> facts) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const WithMax& f : facts) {
    j[f.name] = opt(f.value);
    j[std::string(f.name) + "_max"] = opt(f.max);
  }
  return j;
}

}  // namespace

std::string parse_kernel_module_version(const std::string& text) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024" (or "Open Kernel
  // Module for x86_64  550.54.15  Release Build ..."): the first token after "Module" made of digits and dots.
  const size_t at = text.find("Module");
  if (at == std::string::npos) return "";
  size_t i = at;
  while (i < text.size() && text[i] != '\n') {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
    const std::string tok = text.substr(i, j - i);
    if (!tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) && tok.find('.') != std::string::npos &&
        tok.find_first_not_of("0123456789.") == std::string::npos)
      return tok;
    i = j;
  }
  return "";
}

GpuSystem collect_gpu_system() {
  GpuSystem s;
  DriverFacts& f = s.driver;
  if (auto proc = read_host_file("/proc/driver/nvidia/version")) {
    f.kernel_module_loaded = true;
    f.kernel_version = parse_kernel_module_version(*proc);
  }
  std::vector<nvmlDevice_t> devs;
  auto nv = load_nvml();
  if (!nv) {
    f.nvml_load_error = nv.message();
  } else {
    read_driver_nvml(f, *nv, devs);
    for (size_t i = 0; i < devs.size(); ++i) s.gpus.push_back(read_gpu(*nv, devs[i], static_cast<int>(i)));
    s.topology = read_topology(*nv, devs);
    if (f.nvml_init == kNvmlSuccess && nv->Shutdown) nv->Shutdown();
  }
  read_driver_cuda(f);
  return s;
}

nlohmann::ordered_json gpu_system_json(const GpuSystem& s) {
  using json = nlohmann::ordered_json;
  const DriverFacts& f = s.driver;
  json j;
  j["driver"] = {{"nvml_loaded", f.nvml_loaded},
                 {"nvml_library", f.nvml_path},
                 {"nvml_init", f.nvml_init},
                 {"driver_version", f.user_version},
                 {"kernel_module_version", f.kernel_version},
                 {"cuda_version", f.nvml_cuda_version ? cuda_version_string(f.nvml_cuda_version) : ""},
                 {"cuda_driver_loaded", f.cuda_loaded},
                 {"cuda_driver_library", f.cuda_path},
                 {"cu_init", f.cu_init},
                 {"cuda_driver_version", f.cuda_version ? cuda_version_string(f.cuda_version) : ""},
                 {"cuda_device_count", f.cuda_device_count}};
  json gpus = json::array();
  for (const GpuFacts& g : s.gpus) {
    json procs = json();
    if (g.processes) {
      procs = json::array();
      for (const GpuProcess& p : *g.processes)
        procs.push_back({{"pid", p.pid}, {"name", p.name}, {"used_bytes", p.used_bytes}});
    }
    // One {key, value} row a fact: the report's schema written out (docs/doctor.md names the fields).
    gpus.push_back({
        {"index", g.index},
        {"name", g.name},
        {"uuid", g.uuid},
        {"bus_id", g.bus_id},
        {"compute_capability", g.cc_major >= 0 ? strfmt("%d.%d", g.cc_major, g.cc_minor) : ""},
        {"memory",
         {{"total_bytes", opt(g.mem_total)}, {"used_bytes", opt(g.mem_used)}, {"free_bytes", opt(g.mem_free)}}},
        {"processes", procs},
        {"ecc",
         {{"enabled", opt(g.ecc_enabled)},
          {"pending", opt(g.ecc_pending)},
          {"corrected_volatile", opt(g.ecc_corrected_volatile)},
          {"uncorrected_volatile", opt(g.ecc_uncorrected_volatile)},
          {"corrected_aggregate", opt(g.ecc_corrected_aggregate)},
          {"uncorrected_aggregate", opt(g.ecc_uncorrected_aggregate)},
          {"retired_pages_sbe", opt(g.retired_sbe)},
          {"retired_pages_dbe", opt(g.retired_dbe)},
          {"retired_pages_pending", opt(g.retired_pending)},
          {"remapped_rows_correctable", opt(g.remapped_correctable)},
          {"remapped_rows_uncorrectable", opt(g.remapped_uncorrectable)},
          {"remap_pending", opt(g.remap_pending)},
          {"remap_failure", opt(g.remap_failure)}}},
        {"persistence_mode", opt(g.persistence)},
        {"pcie", with_max({{"gen", g.pcie_gen, g.pcie_gen_max}, {"width", g.pcie_width, g.pcie_width_max}})},
        {"pstate", opt(g.pstate)},
        {"clocks_mhz", with_max({{"sm", g.clock_sm, g.clock_sm_max}, {"mem", g.clock_mem, g.clock_mem_max}})},
        {"clock_event_reasons", opt(g.throttle)},
        {"temperature_c",
         {{"gpu", opt(g.temp_c)}, {"slowdown", opt(g.temp_slowdown_c)}, {"shutdown", opt(g.temp_shutdown_c)}}},
        {"power_w",
         {{"draw", g.power_mw ? json(*g.power_mw / 1000.0) : json()},
          {"limit", g.power_limit_mw ? json(*g.power_limit_mw / 1000.0) : json()}}},
        {"mig", {{"current", opt(g.mig_current)}, {"pending", opt(g.mig_pending)}}},
        {"nvlinks_active", g.nvlinks_active},
        {"numa_node", opt(g.numa_node)},
    });
  }
  j["gpus"] = gpus;
  j["topology"] = {{"level", s.topology.level}, {"nvlink", s.topology.nvlink}};
  return j;
}

}  // namespace mopt::doctor
