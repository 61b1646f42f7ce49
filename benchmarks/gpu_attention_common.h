// What bench_gpu_decode's attention kernel timings (gpu_decode_attention.h, gpu_prefill_attention.h) share: exit on
// a CUDA error, a paged KV cache of random values on the device, and the median time of a launch repeated back to
// back between two events.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "backend/cuda/kernels.h"

namespace mopt::bench {

inline void gpu_ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// One layer's paged KV cache on the device, [n_blocks][K | V][n_head_kv][bs][head_dim] of C, with per-head scales
// 0.01 (read by fp8 caches: K scales [0, n_head_kv), V scales after). bf16: random values; fp8: every code 0x30
// (E4M3 0.5: the values do not change what the kernels read).
template <class C>
struct BenchKvCache {
  C* data = nullptr;
  float* scales = nullptr;
  cuda::KvCacheViewT<C> view;

  BenchKvCache(int64_t n_blocks, int bs, int n_head_kv, int head_dim) {
    const int64_t kv_stride = static_cast<int64_t>(n_head_kv) * bs * head_dim;
    const size_t elems = static_cast<size_t>(n_blocks * 2 * kv_stride);
    gpu_ck(cudaMalloc(reinterpret_cast<void**>(&data), elems * sizeof(C)), "cudaMalloc");
    const std::vector<float> hs(2 * static_cast<size_t>(n_head_kv), 0.01f);
    gpu_ck(cudaMalloc(reinterpret_cast<void**>(&scales), hs.size() * 4), "cudaMalloc");
    gpu_ck(cudaMemcpy(scales, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    if constexpr (sizeof(C) == 1)
      gpu_ck(cudaMemset(data, 0x30, elems), "cudaMemset");
    else
      gpu_ck(cuda::launch_fill_random(data, static_cast<int64_t>(elems), 3, 1.f, 0.f, nullptr), "fill");
    view.k = data;
    view.v = data + kv_stride;
    view.block_stride = 2 * kv_stride;
    view.block_size = bs;
    view.n_head_kv = n_head_kv;
    view.head_dim = head_dim;
    view.k_scale = scales;
    view.v_scale = scales + n_head_kv;
  }
  ~BenchKvCache() {
    cudaFree(data);
    cudaFree(scales);
  }
  BenchKvCache(const BenchKvCache&) = delete;
  BenchKvCache& operator=(const BenchKvCache&) = delete;
};

// Seconds per launch: the median of 20 timings of back_to_back consecutive launch() calls each, after 3 warm-up
// timings; launch() enqueues one launch on the legacy default stream and returns its error.
template <class Launch>
double median_launch_seconds(Launch&& launch, int back_to_back) {
  cudaEvent_t e0, e1;
  gpu_ck(cudaEventCreate(&e0), "event");
  gpu_ck(cudaEventCreate(&e1), "event");
  std::vector<double> t;
  for (int i = 0; i < 23; ++i) {
    gpu_ck(cudaEventRecord(e0), "record");
    for (int k = 0; k < back_to_back; ++k) gpu_ck(launch(), "launch");
    gpu_ck(cudaEventRecord(e1), "record");
    gpu_ck(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    gpu_ck(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (i >= 3) t.push_back(ms / 1e3 / back_to_back);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace mopt::bench
