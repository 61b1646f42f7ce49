// launch_peer_all_reduce (peer_reduce.h): the one-shot all-reduce kernel of PeerComm (peer_comm.h describes the
// protocol: stage, flag barrier per CTA, sum in rank order).
#include <cuda_bf16.h>

#include "backend/cuda/peer_reduce.h"

namespace mopt::cuda {
namespace {

constexpr int kThreads = 512;

// System scope: the flags cross devices (NVLink / PCIe peer memory).
__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// acc[0..kN) += the 16 bytes of v as kN floats (4 fp32 or 8 bf16).
template <bool kF32>
__device__ __forceinline__ void add_vec(float* acc, uint4 v) {
  if constexpr (kF32) {
    acc[0] += __uint_as_float(v.x);
    acc[1] += __uint_as_float(v.y);
    acc[2] += __uint_as_float(v.z);
    acc[3] += __uint_as_float(v.w);
  } else {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int j = 0; j < 4; ++j) {
      acc[2 * j] += __uint_as_float(w[j] << 16);
      acc[2 * j + 1] += __uint_as_float(w[j] & 0xffff0000u);
    }
  }
}

template <bool kF32>
__device__ __forceinline__ uint4 pack_vec(const float* acc) {
  if constexpr (kF32) {
    return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                      __float_as_uint(acc[3]));
  } else {
    uint32_t w[4];
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);  // .x low half
      w[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <bool kF32>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerReduceParams p) {
  __shared__ uint32_t s_count;
  const int cta = blockIdx.x;
  if (threadIdx.x == 0) s_count = p.counts[cta] + 1;
  __syncthreads();
  const uint32_t count = s_count;
  const size_t half = (count & 1u) * p.capacity;
  const size_t first = static_cast<size_t>(cta) * kThreads + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;

  // 1. This CTA's slice of the message into this rank's staging half.
  const uint4* src = static_cast<const uint4*>(p.buf);
  uint4* own = reinterpret_cast<uint4*>(p.stage[p.rank] + half);
  for (size_t i = first; i < p.n_vec; i += stride) {
    own[i] = src[i];
    if (p.add_to) const_cast<uint4*>(src)[i] = make_uint4(0, 0, 0, 0);
  }
  __threadfence_system();
  __syncthreads();

  // 2. Barrier with the same CTA of every rank: thread r raises this CTA's flag at rank r, then waits for rank
  // r's flag here. A peer may already be one call ahead (its flag count + 1), never two.
  if (threadIdx.x < p.size) {
    store_release(p.flags[threadIdx.x] + cta * kPeerReduceMaxRanks + p.rank, count);
    const uint32_t* mine = p.flags[p.rank] + cta * kPeerReduceMaxRanks + threadIdx.x;
    while (static_cast<int32_t>(load_acquire(mine) - count) < 0) {
    }
  }
  __syncthreads();

  // 3. The slice summed over the ranks in rank order (L2 loads: the staging halves are rewritten by peers).
  uint4* dst = static_cast<uint4*>(p.buf);
  for (size_t i = first; i < p.n_vec; i += stride) {
    float acc[8] = {};
    for (int r = 0; r < p.size; ++r) add_vec<kF32>(acc, __ldcg(reinterpret_cast<const uint4*>(p.stage[r] + half) + i));
    if constexpr (kF32) {
      if (p.add_to) {  // the residual: + the sum
        float4* res = reinterpret_cast<float4*>(p.add_to) + i;
        const float4 r = *res;
        *res = make_float4(r.x + acc[0], r.y + acc[1], r.z + acc[2], r.w + acc[3]);
        continue;
      }
    }
    dst[i] = pack_vec<kF32>(acc);
  }
  if (threadIdx.x == 0) p.counts[cta] = count;
}

}  // namespace

cudaError_t launch_peer_all_reduce(const PeerReduceParams& p, bool f32, cudaStream_t stream) {
  if (f32) peer_all_reduce_kernel<true><<<kPeerReduceCtas, kThreads, 0, stream>>>(p);
  else peer_all_reduce_kernel<false><<<kPeerReduceCtas, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mopt::cuda
