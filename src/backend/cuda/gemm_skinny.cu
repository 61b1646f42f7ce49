// Skinny GEMM for decode: y[m, n] = x[m, k] . w[n, k]^T (+ bias) with m <= 8 rows. Decode is bound by reading
// the weights once, so the kernel streams each weight row exactly once with 16-byte loads, several in flight
// per lane, and applies it to all m activation rows (which stay in L1/L2). A warp owns kRowsPerWarp output
// features; the k-reduction is spread over its 32 lanes and finished with shuffles.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace mopt::cuda {
namespace {

constexpr int kWarpsPerCta = 8;

__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// M: activation rows (padded up), kRowsPerWarp: output features per warp, kUnroll: 16-byte loads per lane
// and row in flight. The variants are timed against each other (and cuBLASLt) by Gemm's per-shape tuning.
template <int M, int kRowsPerWarp, int kUnroll>
__global__ void __launch_bounds__(kWarpsPerCta * 32) skinny_gemm_kernel(SkinnyGemmParams p) {
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * kWarpsPerCta + warp) * kRowsPerWarp;
  if (n0 >= p.n) return;
  const int chunks = p.k / 8;
  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[i][r] = 0.f;
  const bf16* wrow[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) wrow[r] = p.w + static_cast<int64_t>(min(n0 + r, p.n - 1)) * p.k;

  for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int ch = c0 + u * 32;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        wv[u][r] = ch < chunks ? load_stream(wrow[r] + ch * 8) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int ch = c0 + u * 32;
      if (ch >= chunks) break;
      float wf[kRowsPerWarp][8];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) unpack8(wv[u][r], wf[r]);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= p.m) break;
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(i) * p.k + ch * 8)), xf);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[i][r] += xf[e] * wf[r][e];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], o);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int n = n0 + r;
      if (n >= p.n) break;
      const float b = p.bias ? __bfloat162float(p.bias[n]) : 0.f;
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i >= p.m) break;
        const int64_t at = static_cast<int64_t>(i) * p.n + n;
        if (p.y_f32) static_cast<float*>(p.y)[at] = acc[i][r] + b;
        else static_cast<bf16*>(p.y)[at] = __float2bfloat16(acc[i][r] + b);
      }
    }
  }
}

template <int M, int R, int U>
cudaError_t launch_one(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int rows_per_cta = kWarpsPerCta * R;
  const dim3 grid((p.n + rows_per_cta - 1) / rows_per_cta);
  return launch_pdl(skinny_gemm_kernel<M, R, U>, grid, dim3(kWarpsPerCta * 32), 0, stream, p);
}

// Variants (rows per warp, unroll): 0 = (2, 4), 1 = (1, 8), 2 = (4, 4), 3 = (1, 4).
template <int M>
cudaError_t dispatch_variant(const SkinnyGemmParams& p, cudaStream_t stream) {
  switch (p.variant) {
    case 0: return launch_one<M, 2, 4>(p, stream);
    case 1: return launch_one<M, 1, 8>(p, stream);
    case 2: return launch_one<M, 4, 4>(p, stream);
    default: return launch_one<M, 1, 4>(p, stream);
  }
}

}  // namespace

cudaError_t launch_skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return cudaSuccess;
  if (p.m > kSkinnyMaxRows || p.k % 8 != 0 || (reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.w)) % 16)
    return cudaErrorInvalidValue;
  if (p.variant < 0 || p.variant >= kSkinnyVariants) return cudaErrorInvalidValue;
  if (p.m == 1) return dispatch_variant<1>(p, stream);
  if (p.m == 2) return dispatch_variant<2>(p, stream);
  if (p.m <= 4) return dispatch_variant<4>(p, stream);
  return dispatch_variant<8>(p, stream);
}

}  // namespace mopt::cuda
