// Containers and devices: /dev/nvidia* nodes, /dev/shm, cgroup memory and CPU limits, ulimit -l / -n.
#include <algorithm>

#include "doctor/checks.h"

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "Containers and devices";  // this file's findings' group, as printed

// NCCL and multi-process serving put their buffers in /dev/shm; Docker's default is 64 MiB.
constexpr uint64_t kShmWantBytes = uint64_t{1} << 30;
// Open files a busy server needs (one socket per connection, plus model shards).
constexpr uint64_t kNofileWant = 4096;
// Locked memory NCCL's and RDMA's pinned buffers need across GPUs.
constexpr uint64_t kMemlockWant = uint64_t{64} << 20;

void check_dev_nodes(const GpuSystem& s, const HostFacts& h, std::vector<Finding>& out) {
  const char* t = "/dev/nvidia* device nodes";
  const bool gpu_expected = s.driver.kernel_module_loaded || !s.gpus.empty();
  if (h.nvidia_devices.empty()) {
    if (gpu_expected)
      add(out, "host.dev_nodes", kGroup, t, Verdict::kFail,
          "the NVIDIA driver is present but there is no /dev/nvidia* device node",
          "In a container, pass the GPUs in (docker run --gpus all / the NVIDIA Container Toolkit, or "
          "--device /dev/nvidia0 --device /dev/nvidiactl --device /dev/nvidia-uvm); on the host, run "
          "'sudo nvidia-modprobe -u -c=0'.");
    else
      add(out, "host.dev_nodes", kGroup, t, Verdict::kSkip, "no /dev/nvidia* (no GPU)");
    return;
  }
  std::string ev, blocked, missing;
  for (const DeviceNode& d : h.nvidia_devices) {
    join_to(ev, d.path + (d.accessible ? "" : " (no access)"));
    if (!d.accessible) join_to(blocked, d.path);
  }
  auto has = [&](const std::string& p) {
    return std::any_of(h.nvidia_devices.begin(), h.nvidia_devices.end(),
                       [&](const DeviceNode& d) { return d.path == p; });
  };
  for (const char* need : {"/dev/nvidiactl", "/dev/nvidia-uvm"})
    if (!has(need)) join_to(missing, need);
  for (const GpuFacts& g : s.gpus)
    if (!has(strfmt("/dev/nvidia%d", g.index))) join_to(missing, strfmt("/dev/nvidia%d", g.index));
  if (!blocked.empty()) {
    add(out, "host.dev_nodes", kGroup, t, Verdict::kFail, ev,
        "This user cannot open " + blocked +
            ": add it to the group owning the nodes (often 'video'), or in a "
            "container allow the devices (--gpus, or the device cgroup rule c 195:* rwm).");
  } else if (!missing.empty()) {
    add(out, "host.dev_nodes", kGroup, t, Verdict::kFail, ev + "; missing " + missing,
        "CUDA needs /dev/nvidiactl, /dev/nvidia-uvm and one /dev/nvidiaN per GPU: run 'sudo nvidia-modprobe -u -c=0' "
        "on the host, or pass them into the container.");
  } else {
    add(out, "host.dev_nodes", kGroup, t, Verdict::kOk, ev);
  }
}

void check_shm(const GpuSystem& s, const HostFacts& h, std::vector<Finding>& out) {
  const char* t = "/dev/shm size";
  if (!h.shm_bytes) {
    add(out, "host.shm", kGroup, t, s.gpus.size() > 1 ? Verdict::kWarn : Verdict::kSkip, "/dev/shm is not mounted",
        s.gpus.size() > 1 ? "NCCL needs /dev/shm between GPUs: mount it (docker --ipc=host or --shm-size=16g)." : "");
    return;
  }
  const std::string ev = "/dev/shm " + gib(*h.shm_bytes);
  if (*h.shm_bytes < kShmWantBytes && s.gpus.size() > 1)
    add(out, "host.shm", kGroup, t, Verdict::kWarn, ev + " with several GPUs",
        "NCCL (tensor parallelism) keeps its buffers in /dev/shm and fails or crawls in Docker's default 64 MiB: run "
        "the container with --ipc=host or --shm-size=16g.");
  else
    add(out, "host.shm", kGroup, t, Verdict::kOk, ev);
}

void check_cgroup(const HostFacts& h, uint64_t model_bytes, std::vector<Finding>& out) {
  const std::string where = h.cgroup_version ? strfmt("cgroup v%d %s", h.cgroup_version, h.cgroup_path.c_str())
                                             : std::string("no cgroup limits found");
  const char* tm = "Memory limit";
  if (!h.cgroup_mem_limit) {
    add(out, "host.cgroup_memory", kGroup, tm, Verdict::kOk, where + ": no memory limit");
  } else {
    std::string ev = where + ": memory limit " + gib(*h.cgroup_mem_limit);
    if (h.mem_total) ev += " of " + gib(*h.mem_total) + " RAM";
    if (model_bytes > 0 && static_cast<double>(model_bytes) > 0.9 * static_cast<double>(*h.cgroup_mem_limit))
      add(out, "host.cgroup_memory", kGroup, tm, Verdict::kFail,
          ev + "; the model's weights take " + gib(model_bytes),
          "The container is killed (OOM) while loading or running: raise its memory limit (docker --memory) above "
          "the weights plus the KV cache, or use a smaller / quantized model.");
    else
      add(out, "host.cgroup_memory", kGroup, tm, Verdict::kOk, ev);
  }
  const char* tc = "CPU quota";
  if (!h.cgroup_cpus) {
    add(out, "host.cgroup_cpu", kGroup, tc, Verdict::kOk,
        strfmt("no CPU quota; %d CPUs online, %d in this process's affinity", h.online_cpus, h.affinity_cpus));
    return;
  }
  const std::string ev = strfmt("CPU quota %.2f CPUs; %d CPUs online, %d in the affinity mask", *h.cgroup_cpus,
                                h.online_cpus, h.affinity_cpus);
  if (*h.cgroup_cpus + 0.5 < static_cast<double>(h.online_cpus))
    add(out, "host.cgroup_cpu", kGroup, tc, Verdict::kWarn, ev,
        strfmt("mopt's CPU backend starts one thread per online CPU (%d) but the container may run only %.0f at "
               "once, so threads stall each other: pass --threads %d.",
               h.online_cpus, *h.cgroup_cpus, std::max(1, static_cast<int>(*h.cgroup_cpus))));
  else
    add(out, "host.cgroup_cpu", kGroup, tc, Verdict::kOk, ev);
}

void check_ulimits(const GpuSystem& s, const HostFacts& h, std::vector<Finding>& out) {
  const char* t = "ulimit -l / -n";
  const std::string ev = "locked memory " +
                         (h.memlock_soft ? strfmt("%llu KiB", static_cast<unsigned long long>(*h.memlock_soft / 1024))
                                         : std::string("unlimited")) +
                         ", open files " + (h.nofile_soft ? std::to_string(*h.nofile_soft) : std::string("unlimited"));
  std::string fix;
  if (h.nofile_soft && *h.nofile_soft < kNofileWant)
    fix += strfmt(
        "mopt serve holds one socket per connection: raise open files (ulimit -n 65536, or LimitNOFILE= "
        "in the systemd unit; the hard limit here is %llu). ",
        static_cast<unsigned long long>(h.nofile_hard));
  if (h.memlock_soft && *h.memlock_soft < kMemlockWant && s.gpus.size() > 1)
    fix += "NCCL over RDMA needs locked memory: ulimit -l unlimited (docker --ulimit memlock=-1).";
  if (fix.empty())
    add(out, "host.ulimits", kGroup, t, Verdict::kOk, ev);
  else
    add(out, "host.ulimits", kGroup, t, Verdict::kWarn, ev, fix);
}

}  // namespace

std::vector<Finding> check_host(const GpuSystem& s, const HostFacts& h, uint64_t model_bytes) {
  std::vector<Finding> out;
  check_dev_nodes(s, h, out);
  check_shm(s, h, out);
  check_cgroup(h, model_bytes, out);
  check_ulimits(s, h, out);
  return out;
}

}  // namespace mopt::doctor
