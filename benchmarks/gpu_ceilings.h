// The GPU's own ceilings that the GPU benchmarks set their figures against, measured in the same run: the
// device-to-device copy bandwidth and cuBLASLt's bf16 GEMM rate.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "bench_clock.h"

namespace mopt::bench {

// One cudaMemcpyAsync of `bytes` device to device, `warmup` untimed and `reps` timed: the median and the best, in
// bytes read plus bytes written per second (both 0 where an allocation or a copy failed).
struct CopyBandwidth {
  double median = 0, best = 0;
};
inline CopyBandwidth measure_copy_bandwidth(size_t bytes, int warmup, int reps) {
  void *a = nullptr, *b = nullptr;
  CopyBandwidth out;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
      cudaMemset(a, 1, bytes) != cudaSuccess) {
    cudaFree(a);
    cudaFree(b);
    return out;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  for (int i = 0; i < warmup + reps; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= warmup) t.push_back(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  if (cudaGetLastError() != cudaSuccess || t.empty() || *std::min_element(t.begin(), t.end()) <= 0) return out;
  out.median = 2.0 * static_cast<double>(bytes) / median(t);
  out.best = 2.0 * static_cast<double>(bytes) / *std::min_element(t.begin(), t.end());
  return out;
}

// bf16 GEMM rate (FLOP/s) of cuBLASLt at m = n = k = 8192 on random data: the median of 10 timed runs after 3
// untimed (0 where an allocation or a launch failed).
inline double measure_gemm_peak() {
  const int n = 8192;
  const size_t elems = static_cast<size_t>(n) * n;
  cuda::bf16 *x = nullptr, *w = nullptr, *y = nullptr;
  cuda::Gemm gemm;
  bool ok = cudaMalloc(reinterpret_cast<void**>(&x), elems * 2) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&w), elems * 2) == cudaSuccess &&
            cudaMalloc(reinterpret_cast<void**>(&y), elems * 2) == cudaSuccess &&
            cuda::launch_fill_random(x, static_cast<int64_t>(elems), 1, 1.f, 0.f, nullptr) == cudaSuccess &&
            cuda::launch_fill_random(w, static_cast<int64_t>(elems), 2, 1.f, 0.f, nullptr) == cudaSuccess &&
            gemm.init().is_ok();
  std::vector<double> t;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; ok && i < 13; ++i) {
    cudaEventRecord(e0);
    ok = gemm.run(x, w, nullptr, y, false, n, n, n, nullptr).is_ok();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 3) t.push_back(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  if (!ok || cudaGetLastError() != cudaSuccess || t.empty()) return 0;
  return 2.0 * n * n * static_cast<double>(n) / median(t);
}

}  // namespace mopt::bench
