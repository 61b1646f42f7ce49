#include "doctor/cuda_driver_api.h"

#include "doctor/dynlib.h"

namespace mopt::doctor {

std::string CudaDriverApi::error_string(CUresult r) const {
  const char* name = nullptr;
  if (GetErrorName) GetErrorName(r, &name);
  return strfmt("%s (%d)", name ? name : "CUDA error", r);
}

Result<CudaDriverApi> load_cuda_driver() {
  CudaDriverApi a;
  MOPT_ASSIGN_OR_RETURN(a.lib, open_library("MOPT_CUDA_DRIVER_LIB", "libcuda.so.1", "the CUDA driver library"));
  const DynLib& lib = a.lib;
  // What doctor cannot do without, then the rest (a null pointer: not exported).
  lib.sym(a.Init, {"cuInit"});
  lib.sym(a.DriverGetVersion, {"cuDriverGetVersion"});
  lib.sym(a.DeviceGetCount, {"cuDeviceGetCount"});
  if (!a.Init || !a.DriverGetVersion || !a.DeviceGetCount)
    return error("%s does not export cuInit / cuDriverGetVersion / cuDeviceGetCount: not a CUDA driver library",
                 lib.path.c_str());
  lib.sym(a.DeviceGet, {"cuDeviceGet"});
  lib.sym(a.DeviceGetName, {"cuDeviceGetName"});
  lib.sym(a.DeviceGetAttribute, {"cuDeviceGetAttribute"});
  lib.sym(a.DeviceGetPCIBusId, {"cuDeviceGetPCIBusId"});
  lib.sym(a.GetErrorName, {"cuGetErrorName"});
  return a;
}

std::string cuda_version_string(int v) { return strfmt("%d.%d", v / 1000, (v % 1000) / 10); }

}  // namespace mopt::doctor
