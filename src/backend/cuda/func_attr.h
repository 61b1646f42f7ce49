// Kernel function attributes (cudaFuncSetAttribute) set once per device: an attribute belongs to the kernel in
// the current device's context, so a process that drives several GPUs (one thread per GPU, tensor parallelism)
// must set it on each of them before launching there.
#pragma once

#include <cuda_runtime_api.h>

namespace mopt::cuda {

// Sets `attr` = `value` on `kernel` for the current device the first time this (device, kernel, attribute) is
// seen (thread-safe); later calls return cudaSuccess at once. A failure is returned and not remembered.
cudaError_t set_func_attr_once(const void* kernel, cudaFuncAttribute attr, int value);

// In *ctas: how many CTAs of `kernel` (`threads` each, `dyn_smem` bytes of dynamic shared memory) the current
// device holds at once when its SMs split L1 / shared memory by `carveout_percent` (the kernel's preferred
// carveout): SMs x the fewer of the occupancy calculator's CTAs per SM and those the carveout's shared memory
// holds (the shared-memory configuration is the smallest Hopper size >= that percentage of the SM's maximum).
// A persistent grid launches this many. Cached per (device, kernel, dyn_smem, percentage); thread-safe.
cudaError_t resident_ctas(const void* kernel, int threads, size_t dyn_smem, int carveout_percent, int* ctas);

}  // namespace mopt::cuda
