#include "doctor/nvml_api.h"

#include "doctor/dynlib.h"

namespace mopt::doctor {

std::string NvmlApi::error_string(nvmlReturn_t r) const {
  const char* s = ErrorString ? ErrorString(r) : nullptr;
  return strfmt("%s (NVML error %d)", s ? s : "unknown error", r);
}

Result<NvmlApi> load_nvml() {
  NvmlApi a;
  MOPT_ASSIGN_OR_RETURN(a.lib,
                        open_library("MOPT_NVML_LIB", "libnvidia-ml.so.1", "the NVIDIA driver's management library"));
  const DynLib& lib = a.lib;
  // Versioned names first: the unversioned ones are the NVML 1.x ABI (smaller structs).
  lib.sym(a.Init, {"nvmlInit_v2"});
  lib.sym(a.Shutdown, {"nvmlShutdown"});
  lib.sym(a.ErrorString, {"nvmlErrorString"});
  lib.sym(a.SystemGetDriverVersion, {"nvmlSystemGetDriverVersion"});
  lib.sym(a.SystemGetCudaDriverVersion, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  lib.sym(a.SystemGetProcessName, {"nvmlSystemGetProcessName"});
  lib.sym(a.DeviceGetCount, {"nvmlDeviceGetCount_v2"});
  lib.sym(a.DeviceGetHandleByIndex, {"nvmlDeviceGetHandleByIndex_v2"});
  lib.sym(a.DeviceGetName, {"nvmlDeviceGetName"});
  lib.sym(a.DeviceGetUUID, {"nvmlDeviceGetUUID"});
  lib.sym(a.DeviceGetPciInfo, {"nvmlDeviceGetPciInfo_v3"});
  lib.sym(a.DeviceGetCudaComputeCapability, {"nvmlDeviceGetCudaComputeCapability"});
  lib.sym(a.DeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
  lib.sym(a.DeviceGetComputeRunningProcesses, {"nvmlDeviceGetComputeRunningProcesses_v3"});
  lib.sym(a.DeviceGetGraphicsRunningProcesses, {"nvmlDeviceGetGraphicsRunningProcesses_v3"});
  lib.sym(a.DeviceGetEccMode, {"nvmlDeviceGetEccMode"});
  lib.sym(a.DeviceGetTotalEccErrors, {"nvmlDeviceGetTotalEccErrors"});
  lib.sym(a.DeviceGetRetiredPages, {"nvmlDeviceGetRetiredPages"});
  lib.sym(a.DeviceGetRetiredPagesPendingStatus, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  lib.sym(a.DeviceGetRemappedRows, {"nvmlDeviceGetRemappedRows"});
  lib.sym(a.DeviceGetPersistenceMode, {"nvmlDeviceGetPersistenceMode"});
  lib.sym(a.DeviceGetCurrPcieLinkGeneration, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  lib.sym(a.DeviceGetMaxPcieLinkGeneration, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  lib.sym(a.DeviceGetCurrPcieLinkWidth, {"nvmlDeviceGetCurrPcieLinkWidth"});
  lib.sym(a.DeviceGetMaxPcieLinkWidth, {"nvmlDeviceGetMaxPcieLinkWidth"});
  lib.sym(a.DeviceGetPerformanceState, {"nvmlDeviceGetPerformanceState"});
  lib.sym(a.DeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
  lib.sym(a.DeviceGetMaxClockInfo, {"nvmlDeviceGetMaxClockInfo"});
  lib.sym(a.DeviceGetClocksEventReasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  lib.sym(a.DeviceGetTemperature, {"nvmlDeviceGetTemperature"});
  lib.sym(a.DeviceGetTemperatureThreshold, {"nvmlDeviceGetTemperatureThreshold"});
  lib.sym(a.DeviceGetPowerUsage, {"nvmlDeviceGetPowerUsage"});
  lib.sym(a.DeviceGetEnforcedPowerLimit, {"nvmlDeviceGetEnforcedPowerLimit"});
  lib.sym(a.DeviceGetMigMode, {"nvmlDeviceGetMigMode"});
  lib.sym(a.DeviceGetTopologyCommonAncestor, {"nvmlDeviceGetTopologyCommonAncestor"});
  lib.sym(a.DeviceGetP2PStatus, {"nvmlDeviceGetP2PStatus"});
  lib.sym(a.DeviceGetNvLinkState, {"nvmlDeviceGetNvLinkState"});
  if (!a.Init || !a.DeviceGetCount || !a.DeviceGetHandleByIndex)
    return error(
        "%s does not export nvmlInit_v2 / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2: it is "
        "not a usable NVML (driver older than R418?)",
        lib.path.c_str());
  return a;
}

}  // namespace mopt::doctor
