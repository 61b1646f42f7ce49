// NVML (libnvidia-ml.so.1), loaded at run time with dlopen: mopt never links it, so it runs where no NVIDIA
// driver exists. Only the functions and types doctor reads are declared, with the layouts and values of NVIDIA's
// nvml.h (NVML API reference, "Device Structs" / "Device Enums"); $MOPT_NVML_LIB names another library (tests
// load a fake one).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "doctor/dynlib.h"

namespace mopt::doctor {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_opaque*;

constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorNotSupported = 3;
constexpr nvmlReturn_t kNvmlErrorNoPermission = 4;
constexpr nvmlReturn_t kNvmlErrorDriverNotLoaded = 9;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr nvmlReturn_t kNvmlErrorLibRmVersionMismatch = 18;

struct nvmlMemory_t {
  unsigned long long total, free, used;  // bytes
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "00000000:3B:00.0"
};
struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t, what the _v3 process queries fill
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes
  unsigned int gpuInstanceId, computeInstanceId;
};

// Enum values (nvml.h).
enum : int { kNvmlClockGraphics = 0, kNvmlClockSm = 1, kNvmlClockMem = 2 };
enum : int { kNvmlTemperatureGpu = 0, kNvmlTempThresholdShutdown = 0, kNvmlTempThresholdSlowdown = 1 };
enum : int { kNvmlEccCorrected = 0, kNvmlEccUncorrected = 1, kNvmlVolatileEcc = 0, kNvmlAggregateEcc = 1 };
enum : int { kNvmlRetiredMultipleSbe = 0, kNvmlRetiredDbe = 1 };
enum : int { kNvmlP2pCapsNvlink = 2, kNvmlP2pStatusOk = 0 };
// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs.
enum : int {
  kNvmlTopologyInternal = 0,
  kNvmlTopologySingle = 10,
  kNvmlTopologyMultiple = 20,
  kNvmlTopologyHostbridge = 30,
  kNvmlTopologyNode = 40,
  kNvmlTopologySystem = 50
};
constexpr int kNvmlNvlinkMaxLinks = 36;
// Clock event ("throttle") reason bits.
constexpr uint64_t kThrottleGpuIdle = 0x1, kThrottleAppClocks = 0x2, kThrottleSwPowerCap = 0x4,
                   kThrottleHwSlowdown = 0x8, kThrottleSyncBoost = 0x10, kThrottleSwThermal = 0x20,
                   kThrottleHwThermal = 0x40, kThrottleHwPowerBrake = 0x80, kThrottleDisplayClock = 0x100;

// The entry points doctor calls. A null pointer: the library does not export it (an older driver); callers treat
// that like NVML_ERROR_FUNCTION_NOT_FOUND.
struct NvmlApi {
  DynLib lib;  // what was dlopen'ed; lib.path, the file, names the driver version (libnvidia-ml.so.550.54.15)

  nvmlReturn_t (*Init)() = nullptr;  // nvmlInit_v2
  nvmlReturn_t (*Shutdown)() = nullptr;
  const char* (*ErrorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*SystemGetDriverVersion)(char*, unsigned) = nullptr;
  nvmlReturn_t (*SystemGetCudaDriverVersion)(int*) = nullptr;
  nvmlReturn_t (*SystemGetProcessName)(unsigned, char*, unsigned) = nullptr;
  nvmlReturn_t (*DeviceGetCount)(unsigned*) = nullptr;                        // _v2
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned, nvmlDevice_t*) = nullptr;  // _v2
  nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;  // _v3
  nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;   // _v3
  nvmlReturn_t (*DeviceGetGraphicsRunningProcesses)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;  // _v3
  nvmlReturn_t (*DeviceGetEccMode)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*DeviceGetTotalEccErrors)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*DeviceGetRetiredPages)(nvmlDevice_t, int, unsigned*, unsigned long long*) = nullptr;
  nvmlReturn_t (*DeviceGetRetiredPagesPendingStatus)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*DeviceGetRemappedRows)(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetPersistenceMode)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*DeviceGetCurrPcieLinkGeneration)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetMaxPcieLinkGeneration)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetCurrPcieLinkWidth)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetMaxPcieLinkWidth)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetPerformanceState)(nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*DeviceGetClockInfo)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetMaxClockInfo)(nvmlDevice_t, int, unsigned*) = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons, or the older ...ThrottleReasons.
  nvmlReturn_t (*DeviceGetClocksEventReasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetTemperatureThreshold)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned*) = nullptr;          // mW
  nvmlReturn_t (*DeviceGetEnforcedPowerLimit)(nvmlDevice_t, unsigned*) = nullptr;  // mW
  nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetTopologyCommonAncestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*DeviceGetP2PStatus)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
  nvmlReturn_t (*DeviceGetNvLinkState)(nvmlDevice_t, unsigned, int*) = nullptr;

  std::string error_string(nvmlReturn_t r) const;  // "Driver/library version mismatch (18)"
};

// dlopen()s $MOPT_NVML_LIB or libnvidia-ml.so.1 and resolves the entry points. The error says what was tried.
// The library stays loaded for the life of the process (NVML is not meant to be unloaded and reloaded).
Result<NvmlApi> load_nvml();

}  // namespace mopt::doctor
