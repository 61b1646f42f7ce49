// What doctor reads about the host and its container: device nodes, /dev/shm, cgroup limits, resource limits,
// CPU features (cpuid), memory and huge pages. Collection only; verdicts are in check_host.cpp / check_cpu.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mopt::doctor {

struct DeviceNode {
  std::string path;         // "/dev/nvidia0"
  bool accessible = false;  // open for read and write allowed (access(2))
};

struct CpuFeature {
  const char* name;  // "avx2", as /proc/cpuinfo spells it
  bool present = false;
};

struct HostFacts {
  std::vector<DeviceNode> nvidia_devices;    // /dev/nvidia*
  std::optional<uint64_t> shm_bytes;         // size of /dev/shm
  int cgroup_version = 0;                    // 1, 2, or 0 (none found)
  std::string cgroup_path;                   // this process's cgroup
  std::optional<uint64_t> cgroup_mem_limit;  // bytes; empty = no limit
  std::optional<double> cgroup_cpus;         // CPU quota / period; empty = no quota
  std::optional<uint64_t> memlock_soft;      // RLIMIT_MEMLOCK bytes; empty = unlimited
  std::optional<uint64_t> nofile_soft;       // RLIMIT_NOFILE; empty = unlimited
  uint64_t nofile_hard = 0;
  int online_cpus = 0;    // what mopt's thread pool sizes itself by
  int affinity_cpus = 0;  // sched_getaffinity
  std::string cpu_model;
  std::vector<CpuFeature> cpu_features;  // from cpuid (with the OS's register-state support, XGETBV)
  std::optional<uint64_t> mem_total, mem_available;
  std::string thp_mode;  // "always", "madvise", "never" (the bracketed one), "" unknown
  std::optional<uint64_t> hugepages_total, hugepage_bytes;
  std::optional<bool> selinux_enforcing;

  bool has_feature(const std::string& name) const;
};

HostFacts collect_host_facts();
nlohmann::ordered_json host_facts_json(const HostFacts& h);

// The cgroup limits for `cgroup_path` under a cgroup v2 unified tree or the v1 memory/cpu controllers (read
// through host_path, walking up to the root: the tightest limit wins). Exposed for tests.
void read_cgroup_limits(const std::string& proc_self_cgroup, HostFacts& h);

}  // namespace mopt::doctor
