// Multi-head latent attention kernels (mla_kernels.h): the latents' RMSNorm and the assembly of per-head q, K and V
// rows. Both are elementwise passes over a few KiB per token; one thread per output element (assemble) or one
// warp per row (norm).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/storage.cuh"
#include "backend/cuda/warp_reduce.cuh"

namespace mopt::cuda {
namespace {

constexpr int kNormWarps = 4;  // rows per CTA of mla_norm_kernel
constexpr int kAssembleThreads = 256;

template <class T>
__global__ void __launch_bounds__(kNormWarps * 32) mla_norm_kernel(MlaNormParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x * kNormWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= p.n_rows) return;  // whole warps
  const T* x = p.x + static_cast<int64_t>(r) * p.x_stride;
  T* out = p.out + static_cast<int64_t>(r) * p.out_stride;
  float ss = 0.f;
  for (int j = lane; j < p.n; j += 32) {
    const float v = to_f32(x[j]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float rstd = rsqrtf(ss / static_cast<float>(p.n) + p.eps);
  for (int j = lane; j < p.n; j += 32) out[j] = from_f32<T>(to_f32(x[j]) * rstd * to_f32(p.weight[j]));
}

template <class T>
__global__ void __launch_bounds__(kAssembleThreads) mla_assemble_kernel(MlaAssembleParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int hd = p.head_dim, H = p.n_head, nope = p.nope, rope = p.rope;
  const int64_t per_token = 3ll * H * hd;
  const int64_t total = per_token * p.n_tokens;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_token;
    const int r = static_cast<int>(i % per_token);  // [3][H][hd]
    const int part = r / (H * hd), h = r / hd % H, j = r % hd;
    const T* q = p.q + (t * H + h) * (nope + rope);              // [q_nope | q_pe]
    const T* kvb = p.kvb + (t * H + h) * (nope + p.v_dim);       // [k_nope | v]
    const T* kpe = p.kva + t * (p.kv_lora + rope) + p.kv_lora;   // [k_pe]
    float v = 0.f;
    if (part == 2) {
      if (j < p.v_dim) v = to_f32(kvb[nope + j]);
    } else if (j < rope) {
      v = to_f32(part == 0 ? q[nope + j] : kpe[j]) * p.rope_factor;
    } else if (j < rope + nope) {
      v = to_f32(part == 0 ? q[j - rope] : kvb[j - rope]);
    }
    p.qkv[i] = from_f32<T>(v);
  }
}

}  // namespace

template <class T>
cudaError_t launch_mla_norm(const MlaNormParamsT<T>& p, cudaStream_t stream) {
  if (p.n_rows <= 0) return cudaSuccess;
  if (!p.x || !p.weight || !p.out || p.n <= 0 || p.x_stride < p.n || p.out_stride < p.n) return cudaErrorInvalidValue;
  return launch_pdl(mla_norm_kernel<T>, dim3((p.n_rows + kNormWarps - 1) / kNormWarps), dim3(kNormWarps * 32), 0,
                    stream, p);
}

template <class T>
cudaError_t launch_mla_assemble(const MlaAssembleParamsT<T>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  if (!p.q || !p.kva || !p.kvb || !p.qkv || p.n_head <= 0 || p.nope < 0 || p.rope <= 0 || p.v_dim <= 0 ||
      p.kv_lora <= 0 || p.head_dim < p.nope + p.rope || p.head_dim < p.v_dim)
    return cudaErrorInvalidValue;
  const int64_t total = 3ll * p.n_head * p.head_dim * p.n_tokens;
  const int64_t blocks = std::min<int64_t>((total + kAssembleThreads - 1) / kAssembleThreads, 8192);
  return launch_pdl(mla_assemble_kernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(kAssembleThreads), 0, stream,
                    p);
}

template cudaError_t launch_mla_norm<bf16>(const MlaNormParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_mla_norm<float>(const MlaNormParamsT<float>&, cudaStream_t);
template cudaError_t launch_mla_assemble<bf16>(const MlaAssembleParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_mla_assemble<float>(const MlaAssembleParamsT<float>&, cudaStream_t);

}  // namespace mopt::cuda
