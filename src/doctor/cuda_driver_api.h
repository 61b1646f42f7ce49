// The CUDA driver library (libcuda.so.1), loaded at run time with dlopen: cuInit tells whether CUDA works at all
// (the runtime mopt was built with needs this driver), cuDriverGetVersion which CUDA version the driver
// supports. Declarations follow NVIDIA's cuda.h; $MOPT_CUDA_DRIVER_LIB names another library (tests load a fake).
#pragma once

#include <string>

#include "core/status.h"
#include "doctor/dynlib.h"

namespace mopt::doctor {

using CUresult = int;
using CUdevice = int;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorInsufficientDriver = 35;
constexpr CUresult kCudaErrorNoDevice = 100;
constexpr CUresult kCudaErrorSystemDriverMismatch = 803;
constexpr CUresult kCudaErrorCompatNotSupportedOnDevice = 804;
constexpr int kCuAttrComputeCapabilityMajor = 75, kCuAttrComputeCapabilityMinor = 76;

struct CudaDriverApi {
  DynLib lib;  // what was dlopen'ed

  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;

  std::string error_string(CUresult r) const;  // "CUDA_ERROR_NO_DEVICE (100)"
};

Result<CudaDriverApi> load_cuda_driver();

// 12040 -> "12.4".
std::string cuda_version_string(int v);

}  // namespace mopt::doctor
