// Small helpers of the GPU kernel benchmarks (bench_gpu_decode's attention timings): exit on a CUDA error, the view
// of a benchmark's paged KV cache, and the median time of a launch repeated back to back between two events.
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

// The view of a KV cache laid out as [block][K | V][n_head_kv][bs][head_dim] at `cache`, with per-head scales
// scales[0 .. n_head_kv) for K and [n_head_kv .. 2 n_head_kv) for V (used by fp8 caches).
template <class C>
cuda::KvCacheViewT<C> bench_kv_view(C* cache, int bs, int n_head_kv, int head_dim, const float* scales) {
  cuda::KvCacheViewT<C> v;
  const int64_t kv_stride = static_cast<int64_t>(n_head_kv) * bs * head_dim;
  v.k = cache;
  v.v = cache + kv_stride;
  v.block_stride = 2 * kv_stride;
  v.block_size = bs;
  v.n_head_kv = n_head_kv;
  v.head_dim = head_dim;
  v.k_scale = scales;
  v.v_scale = scales + n_head_kv;
  return v;
}

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
