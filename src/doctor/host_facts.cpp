#include "doctor/host_facts.h"

#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "doctor/host_files.h"

namespace mopt::doctor {
namespace {

std::vector<DeviceNode> list_nvidia_devices() {
  std::vector<DeviceNode> out;
  const std::string dev = host_path("/dev");
  DIR* d = opendir(dev.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("nvidia", 0) != 0) continue;
    DeviceNode node;
    node.path = "/dev/" + n;
    node.accessible = access((dev + "/" + n).c_str(), R_OK | W_OK) == 0;
    out.push_back(node);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const DeviceNode& a, const DeviceNode& b) { return a.path < b.path; });
  return out;
}

std::optional<uint64_t> limit_of(const std::string& path, bool v2) {
  auto line = read_host_line(path);
  if (!line || line->empty()) return std::nullopt;
  if (v2 && *line == "max") return std::nullopt;
  const uint64_t v = std::strtoull(line->c_str(), nullptr, 10);
  // cgroup v1 writes "no limit" as a huge page-aligned number (9223372036854771712).
  if (!v2 && v >= (uint64_t{1} << 62)) return std::nullopt;
  return v;
}

// Ancestors of a cgroup path, the path itself first: "/a/b" -> "/a/b", "/a", "".
std::vector<std::string> with_ancestors(std::string p) {
  std::vector<std::string> out;
  while (!p.empty() && p != "/") {
    out.push_back(p);
    p = p.substr(0, p.rfind('/'));
  }
  out.push_back("");
  return out;
}

void tighten(std::optional<uint64_t>& cur, std::optional<uint64_t> v) {
  if (v && (!cur || *v < *cur)) cur = v;
}
void tighten(std::optional<double>& cur, std::optional<double> v) {
  if (v && (!cur || *v < *cur)) cur = v;
}

std::optional<double> cpu_quota_v2(const std::string& file) {
  auto line = read_host_line(file);  // "max 100000" or "200000 100000"
  if (!line) return std::nullopt;
  std::istringstream in(*line);
  std::string q;
  double period = 0;
  if (!(in >> q >> period) || q == "max" || period <= 0) return std::nullopt;
  return std::strtod(q.c_str(), nullptr) / period;
}

std::optional<double> cpu_quota_v1(const std::string& dir) {
  auto q = read_host_int(dir + "/cpu.cfs_quota_us");
  auto p = read_host_int(dir + "/cpu.cfs_period_us");
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

void read_cpu_features(HostFacts& h) {
  h.cpu_features = {{"avx2"},     {"fma"},         {"f16c"},        {"bmi2"},    {"avx512f"},
                    {"avx512bw"}, {"avx512_vnni"}, {"avx512_bf16"}, {"avx_vnni"}};
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool ymm = avx && (xcr0 & 0x6) == 0x6;    // SSE + AVX register state saved by the OS
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM state
  const bool fma = ymm && (c & (1u << 12)), f16c = ymm && (c & (1u << 29));
  unsigned b7 = 0, c7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    b7 = b;
    c7 = c;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) a71 = a;
  auto set = [&](const char* n, bool v) {
    for (CpuFeature& f : h.cpu_features)
      if (std::string(f.name) == n) f.present = v;
  };
  set("avx2", ymm && (b7 & (1u << 5)));
  set("fma", fma);
  set("f16c", f16c);
  set("bmi2", b7 & (1u << 8));
  set("avx512f", zmm && (b7 & (1u << 16)));
  set("avx512bw", zmm && (b7 & (1u << 30)));
  set("avx512_vnni", zmm && (c7 & (1u << 11)));
  set("avx512_bf16", zmm && (a71 & (1u << 5)));
  set("avx_vnni", ymm && (a71 & (1u << 4)));
  unsigned brand[12] = {0};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    h.cpu_model.assign(reinterpret_cast<const char*>(brand), strnlen(reinterpret_cast<const char*>(brand), 48));
    while (!h.cpu_model.empty() && h.cpu_model.back() == ' ') h.cpu_model.pop_back();
    h.cpu_model.erase(0, h.cpu_model.find_first_not_of(' '));
  }
#endif
}

}  // namespace

bool HostFacts::has_feature(const std::string& name) const {
  for (const CpuFeature& f : cpu_features)
    if (name == f.name) return f.present;
  return false;
}

void read_cgroup_limits(const std::string& proc_self_cgroup, HostFacts& h) {
  std::string v2_path, mem_v1, cpu_v1;
  std::istringstream in(proc_self_cgroup);
  for (std::string line; std::getline(in, line);) {  // "0::/path" (v2) or "4:memory:/path" (v1)
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && ctrl.empty()) v2_path = path;
    std::istringstream cs(ctrl);
    for (std::string c; std::getline(cs, c, ',');) {
      if (c == "memory") mem_v1 = path;
      if (c == "cpu") cpu_v1 = path;
    }
  }
  if (read_host_file("/sys/fs/cgroup/cgroup.controllers")) {  // the unified (v2) hierarchy is mounted
    h.cgroup_version = 2;
    h.cgroup_path = v2_path;
    for (const std::string& p : with_ancestors(v2_path)) {
      tighten(h.cgroup_mem_limit, limit_of("/sys/fs/cgroup" + p + "/memory.max", true));
      tighten(h.cgroup_cpus, cpu_quota_v2("/sys/fs/cgroup" + p + "/cpu.max"));
    }
    return;
  }
  if (!read_host_file("/sys/fs/cgroup/memory/memory.limit_in_bytes") &&
      !read_host_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    return;
  h.cgroup_version = 1;
  h.cgroup_path = mem_v1;
  // Inside a container the controller is mounted at the container's own cgroup: its path may not exist below the
  // mount, so the mount root is read too.
  for (const std::string& p : with_ancestors(mem_v1))
    tighten(h.cgroup_mem_limit, limit_of("/sys/fs/cgroup/memory" + p + "/memory.limit_in_bytes", false));
  for (const std::string& p : with_ancestors(cpu_v1)) tighten(h.cgroup_cpus, cpu_quota_v1("/sys/fs/cgroup/cpu" + p));
}

HostFacts collect_host_facts() {
  HostFacts h;
  h.nvidia_devices = list_nvidia_devices();
  struct statvfs sv {};
  if (statvfs(host_path("/dev/shm").c_str(), &sv) == 0) h.shm_bytes = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
  if (auto cg = read_host_file("/proc/self/cgroup")) read_cgroup_limits(*cg, h);
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) h.memlock_soft = rl.rlim_cur;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur != RLIM_INFINITY) h.nofile_soft = rl.rlim_cur;
    h.nofile_hard = rl.rlim_max == RLIM_INFINITY ? 0 : rl.rlim_max;
  }
  h.online_cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) h.affinity_cpus = CPU_COUNT(&set);
  read_cpu_features(h);
  h.mem_total = meminfo_value("MemTotal");
  h.mem_available = meminfo_value("MemAvailable");
  h.hugepages_total = meminfo_value("HugePages_Total");
  h.hugepage_bytes = meminfo_value("Hugepagesize");
  if (auto thp = read_host_line("/sys/kernel/mm/transparent_hugepage/enabled")) {
    const size_t a = thp->find('['), b = thp->find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) h.thp_mode = thp->substr(a + 1, b - a - 1);
  }
  if (auto e = read_host_int("/sys/fs/selinux/enforce")) h.selinux_enforcing = *e == 1;
  return h;
}

nlohmann::ordered_json host_facts_json(const HostFacts& h) {
  using json = nlohmann::ordered_json;
  auto opt = [](const auto& v) { return v ? json(*v) : json(); };
  json devs = json::array();
  for (const DeviceNode& d : h.nvidia_devices) devs.push_back({{"path", d.path}, {"accessible", d.accessible}});
  json feats = json::object();
  for (const CpuFeature& f : h.cpu_features) feats[f.name] = f.present;
  return {
      {"nvidia_devices", devs},
      {"shm_bytes", opt(h.shm_bytes)},
      {"cgroup",
       {{"version", h.cgroup_version},
        {"path", h.cgroup_path},
        {"memory_limit_bytes", opt(h.cgroup_mem_limit)},
        {"cpus", opt(h.cgroup_cpus)}}},
      {"ulimit", {{"memlock_bytes", opt(h.memlock_soft)}, {"nofile", opt(h.nofile_soft)}}},
      {"cpu", {{"model", h.cpu_model}, {"online", h.online_cpus}, {"affinity", h.affinity_cpus}, {"features", feats}}},
      {"memory", {{"total_bytes", opt(h.mem_total)}, {"available_bytes", opt(h.mem_available)}}},
      {"huge_pages", {{"thp", h.thp_mode}, {"total", opt(h.hugepages_total)}, {"size_bytes", opt(h.hugepage_bytes)}}},
      {"selinux_enforcing", opt(h.selinux_enforcing)}};
}

}  // namespace mopt::doctor
