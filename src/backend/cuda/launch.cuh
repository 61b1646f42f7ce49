// Kernel launch with Programmatic Dependent Launch (PDL, Hopper): a kernel launched this way may start while
// the previous kernel in the stream is still finishing; it must call pdl_wait() before it touches memory that
// the step's kernels write (weights and the step's metadata may be read before), and pdl_trigger() lets the next
// kernel launch early. This hides most of the launch gap between the ~10 small kernels of a decode layer,
// in streams and in captured CUDA graphs alike. Off on GPUs before compute capability 9.0 (no-ops there).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace mopt::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::);
#endif
}

// True when the current device supports PDL (cached per process; one GPU per process).
inline bool pdl_supported() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return ok;
}

// Shared-memory configuration of every kernel of a fused (small-batch) decode step: an SM can only change its
// L1 / shared-memory split when it is idle, so kernels with different configurations cannot overlap through PDL
// and each change drains the SM. Left to the driver, the skinny GEMMs got 8 or 16 KiB and the decode attention
// 164 KiB, and the attention inside the single-stream CUDA graph cost about twice its time alone (docs/cuda.md,
// "One shared-memory configuration"). 14% of the 228 KiB maximum = the 32 KiB configuration (L1 keeps 224 KiB).
inline constexpr int kDecodeCarveoutPercent = 14;
// Sets kDecodeCarveoutPercent on `kernel` the first time it is seen (thread-safe; kernels_elementwise.cu).
cudaError_t use_decode_carveout(const void* kernel);

template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_supported() ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  // A refused launch also leaves its error in the runtime's last-error slot; cleared here (it is returned), or the
  // next launch's cudaGetLastError() would report it against an unrelated kernel.
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return e;
  }
  return cudaGetLastError();
}

// launch_pdl for the kernels of a fused decode step: the same shared-memory configuration for all of them.
template <class... KArgs, class... Args>
cudaError_t launch_pdl_decode(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              Args&&... args) {
  if (const cudaError_t e = use_decode_carveout(reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
  return launch_pdl(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace mopt::cuda
