// Doctor's checks: each turns collected facts into findings (verdict, evidence, fix). Verdict rules are in
// docs/doctor.md: fail = mopt will not work or results may be wrong; warn = it works, slower or less safely than it
// could; ok; skip = not applicable here. Each check_*.cpp file names the group its findings are printed under
// (its kGroup).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/strfmt.h"
#include "doctor/build_info.h"
#include "doctor/finding.h"
#include "doctor/gpu_facts.h"
#include "doctor/host_facts.h"
#include "doctor/kernel_log.h"

namespace mopt::doctor {

// driver.present, driver.version_match, driver.cuda_version, gpuN.arch.
std::vector<Finding> check_driver(const GpuSystem& s, const BuildInfo& build);
// gpuN.memory, gpuN.ecc, gpuN.pages, gpuN.persistence, gpuN.pcie, gpuN.clocks, gpuN.mig, kernel.xid.
std::vector<Finding> check_gpu_health(const GpuSystem& s, const KernelLog& log);
// topology.gpus (with the suggested tensor-parallel groups).
std::vector<Finding> check_topology(const GpuSystem& s);
// host.dev_nodes, host.shm, host.cgroup_memory, host.cgroup_cpu, host.ulimits. model_bytes: weights to fit (0 =
// no model given).
std::vector<Finding> check_host(const GpuSystem& s, const HostFacts& h, uint64_t model_bytes);
// cpu.features, cpu.memory, cpu.hugepages.
std::vector<Finding> check_cpu(const HostFacts& h, const BuildInfo& build, uint64_t model_bytes);

// Tensor-parallel groups: the largest power-of-two size k <= n for which the GPUs split into groups of k that are
// all pairwise `linked` (greedy, in index order). Returns the groups (one group of one GPU each when none pair up).
std::vector<std::vector<int>> tensor_parallel_groups(const std::vector<std::vector<bool>>& linked);

}  // namespace mopt::doctor
