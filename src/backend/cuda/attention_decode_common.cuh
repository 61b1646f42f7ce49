// Pieces shared by the two decode attention kernels (attention_decode.cu: one query token per work item on the
// CUDA cores, any head_dim; attention_decode_mma.cu: head_dim 128 on the tensor cores): the CTA size, cp.async,
// a CTA's slice of the cached positions and the end of a CTA (combine, write or merge the split partials).
// The grid, splits and merge are described in attention_decode.cu's header comment.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda::decode_attn {

constexpr int kThreads = 128;
constexpr int kMaxHeadsPerCta = 8;
constexpr float kLog2e = 1.4426950408889634f;

// cp.async (sm_80+): BYTES (16 or 8) global -> shared, bypassing registers (16: also L1); with pred false the
// bytes are zero-filled and nothing is read. A thread's copies are visible to that thread after cp_async_wait.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(pred ? 16 : 0)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem), "r"(pred ? 8 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The end of a decode CTA, after its NSUB partial states (m, l [NSUB][GT] then acc [NSUB][GT][ACC] floats (ACC >=
// HD: a padded row stride), the log2-domain max, the sum and the unnormalized output of each of the first
// heads_per_cta heads) are in `st`
// (shared memory) and a __syncthreads: combines them, then writes the output (one split used) or the partial
// state, and the last split's CTA merges (see the header comment). Every thread of the CTA calls it.
template <class T, class C, int NSUB, int GT, int HD, int ACC = HD>
__device__ __forceinline__ void finish_cta(const DecodeAttnParamsT<T, C>& p, const float* st, int heads_per_cta,
                                           int t, int h0, int split, int used, float vscale) {
  constexpr bool kFp8 = std::is_same_v<C, fp8>;
  __shared__ bool is_last;
  __shared__ float sm_wm[GT][kDecodeMaxSplits], sm_wl[GT][kDecodeMaxSplits];  // merge: per head and split
  const float* sm_m = st;                 // [NSUB][GT]
  const float* sm_l = sm_m + NSUB * GT;   // [NSUB][GT]
  const float* sm_acc = sm_l + NSUB * GT; // [NSUB][GT][ACC]
  // This CTA's state per head: o = A / L (normalized), running max mx (log2 domain) and sum L.
  const int64_t row0 = static_cast<int64_t>(t) * p.n_head + h0;  // first output row [t, h0]
  // Partials: workspace [n_tokens, n_head, n_splits, HD] then ml [n_tokens, n_head, n_splits, 2].
  float* ml = p.workspace + static_cast<int64_t>(p.n_tokens) * p.n_head * p.n_splits * HD;
  for (int idx = threadIdx.x; idx < heads_per_cta * HD; idx += kThreads) {
    const int g = idx / HD, d = idx % HD;
    float mx = -INFINITY;
    for (int s = 0; s < NSUB; ++s) mx = fmaxf(mx, sm_m[s * GT + g]);
    float L = 0.f, A = 0.f;
    if (mx != -INFINITY) {
      for (int s = 0; s < NSUB; ++s) {
        const float w = exp2f(sm_m[s * GT + g] - mx);
        L += sm_l[s * GT + g] * w;
        A += sm_acc[(s * GT + g) * ACC + d] * w;
      }
    }
    float o = L > 0.f ? A / L : 0.f;
    if constexpr (kFp8) o *= vscale;
    if (used == 1) {
      p.out[(row0 + g) * HD + d] = from_f32<T>(o);
    } else {
      const int64_t item = (row0 + g) * p.n_splits + split;
      p.workspace[item * HD + d] = o;
      if (d == 0) {
        ml[item * 2] = mx;
        ml[item * 2 + 1] = L;
      }
    }
  }
  if (used == 1) return;

  // Ticket: the last of the `used` CTAs of this (token, head group) merges. Writers fence their partials
  // (device scope) before the ticket; the last CTA fences after it before reading the others' partials,
  // which it reads through L2 (__ldcg; L1 is not coherent across SMs).
  uint32_t* counter = p.counters + static_cast<int64_t>(t) * gridDim.y + blockIdx.y;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(counter, 1u) == static_cast<unsigned>(used - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // Merge in three passes so that the L2 round trips are not serialized per output element: (1) the (max, sum)
  // pairs of every head and split, loaded in parallel; (2) per head, the running max and each split's weight
  // w_s = L_s 2^(m_s - max) / sum_s'(...), in split order; (3) every output o = sum_s w_s o_s.
  for (int i = threadIdx.x; i < heads_per_cta * used; i += kThreads) {
    const int g = i / used, sp = i % used;
    const int64_t item = (row0 + g) * p.n_splits + sp;
    sm_wm[g][sp] = __ldcg(ml + item * 2);
    sm_wl[g][sp] = __ldcg(ml + item * 2 + 1);
  }
  __syncthreads();
  if (threadIdx.x < heads_per_cta) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int sp = 0; sp < used; ++sp) mx = fmaxf(mx, sm_wm[g][sp]);
    float wsum = 0.f;
    for (int sp = 0; sp < used; ++sp) {
      sm_wl[g][sp] = mx == -INFINITY ? 0.f : sm_wl[g][sp] * exp2f(sm_wm[g][sp] - mx);
      wsum += sm_wl[g][sp];
    }
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    for (int sp = 0; sp < used; ++sp) sm_wl[g][sp] *= inv;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads_per_cta * HD; idx += kThreads) {
    const int g = idx / HD, d = idx % HD;
    const float* part = p.workspace + (row0 + g) * p.n_splits * HD + d;  // split sp at part[sp * HD]
    float o = 0.f;
#pragma unroll 8
    for (int sp = 0; sp < used; ++sp) o += sm_wl[g][sp] * __ldcg(part + static_cast<int64_t>(sp) * HD);
    p.out[(row0 + g) * HD + d] = from_f32<T>(o);
  }
  // Every one of the `used` CTAs has taken its ticket: nothing else touches the counter in this launch, and
  // the next launch (stream order / graph replay, PDL waits included) sees 0.
  if (threadIdx.x == 0) *counter = 0u;
}

// The slice of token t's cached positions that split `split` of a decode CTA covers: the context is [begin,
// begin + len) (a sliding window cuts its start; padding, pos < 0, has len 0 and writes zeros), of which `used`
// splits take ceil(len / used) positions each. split >= used: no slice (the CTA exits; uniform across it).
struct CtaSlice {
  int used, s0, s1;  // [s0, s1): this CTA's positions
};
template <class T, class C>
__device__ __forceinline__ CtaSlice cta_slice(const DecodeAttnParamsT<T, C>& p, int t, int split) {
  const int pos = p.positions[t];
  const int begin = pos >= 0 && p.window > 0 ? max(0, pos + 1 - p.window) : 0;
  const int len = pos >= 0 ? pos + 1 - begin : 0;
  CtaSlice c{decode_splits_used(len, p.n_splits, p.min_slice), 0, 0};
  if (split < c.used) {
    const int chunk = (len + c.used - 1) / c.used;
    c.s0 = begin + split * chunk;
    c.s1 = min(begin + len, c.s0 + chunk);
  }
  return c;
}

// What a decode CTA works on: token t, query heads h0 .. h0 + heads_per_cta - 1 of KV head kvh, split `split`
// and its slice. split >= slice.used: nothing (the CTA exits; uniform across it).
struct CtaWork {
  int t, h0, kvh, split;
  CtaSlice slice;
};
template <class T, class C>
__device__ __forceinline__ CtaWork cta_work(const DecodeAttnParamsT<T, C>& p, int heads_per_cta, int group) {
  CtaWork w;
  w.t = blockIdx.x;
  w.h0 = blockIdx.y * heads_per_cta;
  w.kvh = w.h0 / group;
  w.split = blockIdx.z;
  w.slice = cta_slice(p, w.t, w.split);
  return w;
}

// The tensor-core kernel for head_dim 128 and a bf16 or fp8 cache (T = bf16), launched on `grid` with `hpc` query
// heads per CTA of a GQA group of `group` (attention_decode_mma.cu). The caller checks the conditions
// (mma_supported).
template <class C>
cudaError_t launch_mma(const DecodeAttnParamsT<bf16, C>& p, int hpc, int group, dim3 grid, cudaStream_t stream);

// Whether launch_mma serves this launch: head_dim 128 with 16-byte aligned rows (the engine's caches are 256-byte
// aligned), and not the small shared-memory configuration of a fused step with <= 2 heads per CTA.
template <class T, class C>
bool mma_supported(const DecodeAttnParamsT<T, C>& p, int hpc) {
  if constexpr (!std::is_same_v<T, bf16> || std::is_same_v<C, float>) {
    return false;
  } else {
    const bool aligned = (reinterpret_cast<uintptr_t>(p.cache.k) | reinterpret_cast<uintptr_t>(p.cache.v) |
                          static_cast<uintptr_t>(p.cache.block_stride)) % 16 == 0;
    return p.cache.head_dim == 128 && aligned && !(p.small_smem && hpc <= 2);
  }
}

}  // namespace mopt::cuda::decode_attn
