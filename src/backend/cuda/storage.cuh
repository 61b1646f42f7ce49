// Device helpers for kernels templated on their storage type T (bf16, or float for --dtype float32): one
// source, two instantiations. Arithmetic is always fp32; only loads and stores depend on T.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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
  using Word = uint4;
  uint4 u[sizeof(T) / 2];
};
// fp8 (E4M3) KV cache: 8 elements are one 8-byte word.
template <>
struct Raw8<__nv_fp8_e4m3> {
  using Word = uint2;
  uint2 u[1];
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

// E4M3 -> fp32 is exact (through fp16, which holds every E4M3 value).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

__device__ __forceinline__ void unpack8(const Raw8<__nv_fp8_e4m3>& r, float* f) {
  const uint32_t w[2] = {r.u[0].x, r.u[0].y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = e4m3x2_to_float2(w[i] & 0xffffu), b = e4m3x2_to_float2(w[i] >> 16);
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

// fp32 -> E4M3, round to nearest even, saturating to +-448 (NaN stays NaN).
__device__ __forceinline__ __nv_fp8_e4m3 to_e4m3(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
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

// The inverse of load8 + unpack8: f[0..8) rounded to T (bf16 or float) and stored at p, aligned to 8 elements.
template <class T>
__device__ __forceinline__ void store8(T* p, const float* f) {
  if constexpr (sizeof(T) == 4) {
    reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);  // .x: the low half
      w[k] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace mopt::cuda
