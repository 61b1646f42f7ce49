// What doctor reads about the NVIDIA driver and GPUs (through NVML and the CUDA driver library, both loaded at
// run time, and /proc/driver/nvidia). Collection only: the verdicts are in check_*.cpp. A field that could not be
// read (older driver, not supported on this GPU, no permission) stays empty.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mopt::doctor {

struct DriverFacts {
  bool nvml_loaded = false;
  std::string nvml_path;        // the library file loaded
  std::string nvml_load_error;  // why it could not be loaded
  int nvml_init = -1;           // nvmlInit_v2's return (0 ok; 18 driver/library mismatch; 9 driver not loaded)
  std::string nvml_init_error;
  std::string user_version;           // user-space driver: NVML's, else the library file's name (550.54.15)
  bool kernel_module_loaded = false;  // /proc/driver/nvidia/version exists
  std::string kernel_version;         // kernel module version from /proc/driver/nvidia/version
  int nvml_cuda_version = 0;          // CUDA version the driver supports, from NVML (12040 = 12.4)

  bool cuda_loaded = false;
  std::string cuda_path, cuda_load_error;
  int cu_init = -1;  // cuInit(0)'s return
  std::string cu_init_error;
  int cuda_version = 0;  // cuDriverGetVersion
  int cuda_device_count = -1;
};

struct GpuProcess {
  unsigned pid = 0;
  std::string name;
  uint64_t used_bytes = 0;
};

struct GpuFacts {
  int index = 0;  // NVML index
  std::string name, uuid, bus_id;
  int cc_major = -1, cc_minor = -1;
  std::optional<uint64_t> mem_total, mem_used, mem_free;  // bytes
  std::optional<std::vector<GpuProcess>> processes;       // compute + graphics, merged by pid
  std::optional<bool> ecc_enabled, ecc_pending;
  std::optional<uint64_t> ecc_corrected_volatile, ecc_uncorrected_volatile;
  std::optional<uint64_t> ecc_corrected_aggregate, ecc_uncorrected_aggregate;
  std::optional<unsigned> retired_sbe, retired_dbe;  // retired pages (pre-Ampere)
  std::optional<bool> retired_pending;
  std::optional<unsigned> remapped_correctable, remapped_uncorrectable;  // remapped rows (Ampere and later)
  std::optional<bool> remap_pending, remap_failure;
  std::optional<bool> persistence;
  std::optional<unsigned> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  std::optional<int> pstate;                                                 // 0 = P0 (full performance) .. 15
  std::optional<unsigned> clock_sm, clock_sm_max, clock_mem, clock_mem_max;  // MHz
  std::optional<uint64_t> throttle;                                          // clock event reason bits
  std::optional<unsigned> temp_c, temp_slowdown_c, temp_shutdown_c;
  std::optional<unsigned> power_mw, power_limit_mw;
  std::optional<unsigned> mig_current, mig_pending;
  int nvlinks_active = 0;
  std::optional<int> numa_node;  // from /sys/bus/pci/devices/<bus id>/numa_node
};

// Pairwise links between GPUs i and j (i != j).
struct GpuTopology {
  std::vector<std::vector<int>> level;    // nvmlGpuTopologyLevel_t (10 single PCIe switch .. 50 across sockets)
  std::vector<std::vector<bool>> nvlink;  // NVLink P2P (direct or through NVSwitch)
};

struct GpuSystem {
  DriverFacts driver;
  std::vector<GpuFacts> gpus;
  GpuTopology topology;
};

GpuSystem collect_gpu_system();

// The facts as JSON (doctor --json "gpu" section; scripts/doctor_vs_smi.sh reads it).
nlohmann::ordered_json gpu_system_json(const GpuSystem& s);

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..." -> "550.54.15".
std::string parse_kernel_module_version(const std::string& proc_text);

}  // namespace mopt::doctor
