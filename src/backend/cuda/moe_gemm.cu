// The expert GEMMs of a mixture-of-experts layer and the weighted sum of the experts' outputs (moe_kernels.h).
//
// launch_moe_gemm: grid (max_blocks, n_out / kColsPerCta). A CTA takes block b of the bucketed pairs (one expert e,
// up to kMoeBlockRows pairs), stages those pairs' input rows in shared memory as fp32 (kChunk columns at a time;
// the SwiGLU prologue applied while staging), and each warp streams kColsPerWarp rows of W[e] (16-byte loads,
// lanes along k) multiplying each loaded weight vector with every staged pair: the expert's weights are read once
// per block, whatever the number of pairs in it. Blocks past the ones the routing used exit at once. Grid x is
// the block index so that the CTAs reading the same weight rows for different blocks of one expert run close in
// time (L2 reuse for batches). A GEMV at decode (one pair per expert), a SIMT GEMM for batches: prefill is
// correct but not tensor-core fast (docs/moe.md).
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kColsPerWarp = 4;
constexpr int kColsPerCta = kWarps * kColsPerWarp;
constexpr int kChunk = 1024;  // staged input columns per pair: kMoeBlockRows * kChunk fp32 = 32 KiB
constexpr int R = kMoeBlockRows;
constexpr int kUnroll = 2;

// Weights are streamed once: bf16 rows bypass L1 (as the skinny GEMM's loads); fp32 (tests) plain loads.
__device__ __forceinline__ Raw8<bf16> load_weights(const bf16* p) {
  Raw8<bf16> r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.u[0].x), "=r"(r.u[0].y), "=r"(r.u[0].z), "=r"(r.u[0].w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ Raw8<float> load_weights(const float* p) { return load8(p); }

template <class T>
__global__ void __launch_bounds__(kWarps * 32) moe_gemm_kernel(MoeGemmParamsT<T> p) {
  pdl_wait();
  __shared__ __align__(16) float xs[R][kChunk];
  __shared__ int pairs[R];
  const int b = blockIdx.x;
  const int e = p.block_expert[b];
  if (e < 0) return;  // uniform over the CTA
  if (threadIdx.x < R) pairs[threadIdx.x] = p.block_pairs[static_cast<int64_t>(b) * R + threadIdx.x];
  __syncthreads();
  int nv = 0;  // valid pairs come first in a block
#pragma unroll
  for (int r = 0; r < R; ++r) nv += pairs[r] >= 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n0 = blockIdx.y * kColsPerCta + warp * kColsPerWarp;
  const int K = p.k;
  const T* wbase = p.w + (static_cast<int64_t>(e) * p.n_out) * K;
  float acc[R][kColsPerWarp];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) acc[r][c] = 0.f;

  for (int k0 = 0; k0 < K; k0 += kChunk) {
    const int kc = min(kChunk, K - k0);
    __syncthreads();  // the previous chunk's readers are done
    // Stage: nv rows x kc columns, 8 at a time.
    for (int idx = threadIdx.x; idx < nv * (kc / 8); idx += blockDim.x) {
      const int r = idx / (kc / 8), i = (idx % (kc / 8)) * 8;
      const int64_t pr = pairs[r];
      float f[8];
      if (p.swiglu) {
        const T* row = p.x + pr * 2 * K;
        float g[8], u[8];
        unpack8(load8(row + k0 + i), g);
        unpack8(load8(row + K + k0 + i), u);
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const float ex = sizeof(T) == 2 ? __expf(-g[q]) : expf(-g[q]);
          f[q] = g[q] / (1.f + ex) * u[q];
        }
      } else {
        unpack8(load8(p.x + (pr / p.x_div) * K + k0 + i), f);
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) xs[r][i + q] = f[q];
    }
    __syncthreads();
    // U steps of 256 columns per iteration: U * kColsPerWarp 16-byte weight loads in flight per lane.
    for (int i0 = lane * 8; i0 < kc; i0 += kUnroll * 256) {
      Raw8<T> raw[kUnroll][kColsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int c = 0; c < kColsPerWarp; ++c) {
          const int i = i0 + u * 256, n = n0 + c;
          raw[u][c] = i < kc && n < p.n_out ? load_weights(wbase + static_cast<int64_t>(n) * K + k0 + i) : zero8<T>();
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * 256;
        if (i >= kc) break;
        float wf[kColsPerWarp][8];
#pragma unroll
        for (int c = 0; c < kColsPerWarp; ++c) unpack8(raw[u][c], wf[c]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= nv) break;
          const float4 xa = *reinterpret_cast<const float4*>(&xs[r][i]);
          const float4 xb = *reinterpret_cast<const float4*>(&xs[r][i + 4]);
#pragma unroll
          for (int c = 0; c < kColsPerWarp; ++c) {
            float a = acc[r][c];
            a = fmaf(wf[c][0], xa.x, a);
            a = fmaf(wf[c][1], xa.y, a);
            a = fmaf(wf[c][2], xa.z, a);
            a = fmaf(wf[c][3], xa.w, a);
            a = fmaf(wf[c][4], xb.x, a);
            a = fmaf(wf[c][5], xb.y, a);
            a = fmaf(wf[c][6], xb.z, a);
            a = fmaf(wf[c][7], xb.w, a);
            acc[r][c] = a;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= nv) break;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      float v = acc[r][c];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[r][c] = v;
    }
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c)
        if (n0 + c < p.n_out) p.y[static_cast<int64_t>(pairs[r]) * p.n_out + n0 + c] = from_f32<T>(acc[r][c]);
    }
  }
}

template <class T>
__global__ void moe_combine_kernel(MoeCombineParamsT<T> p) {
  pdl_wait();
  const int t = blockIdx.x;
  const float* w = p.pick_w + static_cast<int64_t>(t) * p.k;
  const T* y = p.y + static_cast<int64_t>(t) * p.k * p.n_embd;
  T* out = p.out + static_cast<int64_t>(t) * p.n_embd;
  const float g = p.shared_gate ? p.shared_gate[t] : 0.f;
  for (int c = threadIdx.x; c < p.n_embd; c += blockDim.x) {
    float a = 0.f;
    for (int j = 0; j < p.k; ++j) a += w[j] * to_f32(y[static_cast<int64_t>(j) * p.n_embd + c]);
    if (p.shared_gate) a += g * to_f32(out[c]);
    out[c] = from_f32<T>(a);
  }
}

}  // namespace

template <class T>
cudaError_t launch_moe_gemm(const MoeGemmParamsT<T>& p, cudaStream_t stream) {
  if (p.max_blocks <= 0 || p.n_out <= 0) return cudaSuccess;
  if (p.k <= 0 || p.k % 8 != 0 || p.x_div <= 0) return cudaErrorInvalidValue;
  const int tiles = (p.n_out + kColsPerCta - 1) / kColsPerCta;
  if (tiles > 65535) return cudaErrorInvalidValue;
  return launch_pdl(moe_gemm_kernel<T>, dim3(p.max_blocks, tiles), dim3(kWarps * 32), 0, stream, p);
}

template <class T>
cudaError_t launch_moe_combine(const MoeCombineParamsT<T>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  if (p.k <= 0 || p.n_embd <= 0) return cudaErrorInvalidValue;
  return launch_pdl(moe_combine_kernel<T>, dim3(p.n_tokens), dim3(256), 0, stream, p);
}

template cudaError_t launch_moe_gemm<bf16>(const MoeGemmParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_moe_gemm<float>(const MoeGemmParamsT<float>&, cudaStream_t);
template cudaError_t launch_moe_combine<bf16>(const MoeCombineParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_moe_combine<float>(const MoeCombineParamsT<float>&, cudaStream_t);

}  // namespace mopt::cuda
