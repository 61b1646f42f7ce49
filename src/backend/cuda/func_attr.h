// Kernel function attributes (cudaFuncSetAttribute) set once per device: an attribute belongs to the kernel in
// the current device's context, so a process that drives several GPUs (one thread per GPU, tensor parallelism)
// must set it on each of them before launching there.
#pragma once

#include <cuda_runtime_api.h>

namespace mopt::cuda {

// Sets `attr` = `value` on `kernel` for the current device the first time this (device, kernel, attribute) is
// seen (thread-safe); later calls return cudaSuccess at once. A failure is returned and not remembered.
cudaError_t set_func_attr_once(const void* kernel, cudaFuncAttribute attr, int value);

}  // namespace mopt::cuda
