// The kernels of multi-head latent attention (DeepSeek-V2) on the CUDA backend (runner_mla.cpp, docs/moe.md "On
// the GPU"). The projections are ordinary GEMMs; these two kernels sit between them, and the ordinary RoPE +
// cache-write kernel and paged attention run after them. Conventions of kernels.h: T = bf16 or float, enqueue
// only (graph-safe), no allocation.
//
// Per token (H heads, nope = qk_nope_dim, rope = qk_rope_dim, vd = v_head_dim, hd = the cache's head_dim >= nope
// + rope and >= vd):
//   q    [H, nope + rope] = q_proj(x), or q_b_proj(norm(q_a_proj(x)))        per head [q_nope | q_pe]
//   kva  [kv_lora + rope] = kv_a_proj_with_mqa(x)                             [c_kv | k_pe]
//   kvb  [H, nope + vd]   = kv_b_proj(norm(c_kv))                             per head [k_nope | v]
//   launch_mla_assemble -> qkv [3, H, hd], launch_qkv_rope_cache's rows (q | k | v, n_head_kv = H):
//     q_h = [q_pe * f | q_nope | 0],  k_h = [k_pe * f | k_nope | 0],  v_h = [v | 0]    (f = yarn attention factor)
//   The rotary part comes first so that launch_qkv_rope_cache rotates it (it rotates each head's first rope_dim
//   dims); the order of the dims does not change q . k, and the zero padding adds nothing to q . k or to the
//   output, whose padded dims are zero (the o projection's padded input columns are zero too: runner_mla.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace mopt::cuda {

// out[r, 0 .. n) = x[r, 0 .. n) * rsqrt(mean(x[r, 0 .. n)^2) + eps) * weight, for r < n_rows (fp32 arithmetic).
// x and out may be the same rows (in place).
template <class T>
struct MlaNormParamsT {
  const T* x = nullptr;       // [n_rows, x_stride]
  const T* weight = nullptr;  // [n]
  T* out = nullptr;           // [n_rows, out_stride]
  int n_rows = 0, n = 0, x_stride = 0, out_stride = 0;
  float eps = 1e-6f;
};
template <class T>
cudaError_t launch_mla_norm(const MlaNormParamsT<T>& p, cudaStream_t stream);

template <class T>
struct MlaAssembleParamsT {
  const T* q = nullptr;    // [n_tokens, n_head, nope + rope]
  const T* kva = nullptr;  // [n_tokens, kv_lora + rope]
  const T* kvb = nullptr;  // [n_tokens, n_head, nope + v_dim]
  T* qkv = nullptr;        // [n_tokens, 3, n_head, head_dim]
  int n_tokens = 0, n_head = 0, head_dim = 0, nope = 0, rope = 0, v_dim = 0, kv_lora = 0;
  float rope_factor = 1.f;  // multiplies q_pe and k_pe (RoPE is linear: the same as after the rotation)
};
template <class T>
cudaError_t launch_mla_assemble(const MlaAssembleParamsT<T>& p, cudaStream_t stream);

}  // namespace mopt::cuda
