#include "cli/device_facts.h"

#include "doctor/gpu_facts.h"
#include "doctor/host_facts.h"

namespace mopt::cli {

nlohmann::ordered_json device_facts(DeviceKind device) {
  using json = nlohmann::ordered_json;
  const doctor::HostFacts host = doctor::collect_host_facts();
  json out = {{"kind", device_name(device)},
              {"cpu", host.cpu_model},
              {"cpu_cores", host.affinity_cpus > 0 ? host.affinity_cpus : host.online_cpus},
              {"memory_bytes", host.mem_total ? json(*host.mem_total) : json()}};
  if (device != DeviceKind::kCuda) return out;
  const doctor::GpuSystem gpus = doctor::collect_gpu_system();
  out["driver"] = gpus.driver.user_version;
  json list = json::array();
  for (const doctor::GpuFacts& g : gpus.gpus)
    list.push_back({{"name", g.name},
                    {"memory_bytes", g.mem_total ? json(*g.mem_total) : json()},
                    {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)}});
  out["gpus"] = list;  // all of the machine's, as NVML numbers them (CUDA_VISIBLE_DEVICES may pick fewer)
  return out;
}

}  // namespace mopt::cli
