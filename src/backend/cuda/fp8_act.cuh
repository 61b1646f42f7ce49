// Per-token FP8 (E4M3) activation quantization, device side: the one definition of the scale and the codes that
// every kernel writing an FP8 GEMM's input uses (kernels.h launch_quantize_rows_fp8, and the RMSNorm and SwiGLU
// kernels that quantize their own output rows), so that all of them write the same bytes and scales for the same
// bf16 row. As the CPU backend (core/formats fp8_from_float): d = max |x| / 448, codes of x * (1 / d) with an IEEE
// division, rounded to nearest even and saturated at +-448; a zero row gets d = 0 and zero codes.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace mopt::cuda {

struct Fp8RowScale {
  float d = 0.f;    // the row's scale, stored beside the codes
  float inv = 0.f;  // 1 / d (0 for a zero row), what the codes multiply by
};

__device__ __forceinline__ Fp8RowScale fp8_row_scale(float amax) {
  const float d = amax / 448.0f;
  return {d, d != 0.f ? 1.0f / d : 0.f};
}

// The E4M3 byte of x in a row of scale s.
__device__ __forceinline__ uint32_t fp8_act_code(float x, const Fp8RowScale& s) {
  return __nv_cvt_float_to_fp8(x * s.inv, __NV_SATFINITE, __NV_E4M3);
}

// max over the CTA of v >= 0 (blockDim.x a multiple of 32, <= 1024); every thread gets the result. Its own shared
// memory, so it may follow another block reduction of the same kernel without a race on that one's buffers.
__device__ __forceinline__ float block_max_nonneg(float v) {
  __shared__ float partial[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

}  // namespace mopt::cuda
