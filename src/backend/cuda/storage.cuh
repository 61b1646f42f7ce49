// Device helpers for kernels templated on their storage type T (bf16, or float for --dtype float32): one
// source, two instantiations. Arithmetic is always fp32; only loads and stores depend on T.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mopt::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }  // F16 checkpoints (upload)

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// 8 consecutive elements as raw 16-byte words: one uint4 for bf16, two for float. The source must be aligned
// to 8 elements (16 bytes for bf16, 32 for float).
template <class T>
struct Raw8 {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "bf16 or float storage");
  uint4 u[sizeof(T) / 2];
};

template <class T>
__device__ __forceinline__ Raw8<T> load8(const T* p) {
  Raw8<T> r;
  const uint4* s = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) r.u[i] = s[i];
  return r;
}

template <class T>
__device__ __forceinline__ Raw8<T> zero8() {
  Raw8<T> r;
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) r.u[i] = make_uint4(0, 0, 0, 0);
  return r;
}

__device__ __forceinline__ void unpack8(const Raw8<float>& r, float* f) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    f[4 * i] = __uint_as_float(r.u[i].x);
    f[4 * i + 1] = __uint_as_float(r.u[i].y);
    f[4 * i + 2] = __uint_as_float(r.u[i].z);
    f[4 * i + 3] = __uint_as_float(r.u[i].w);
  }
}

__device__ __forceinline__ void unpack8(const Raw8<__nv_bfloat16>& r, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(r.u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

}  // namespace mopt::cuda
