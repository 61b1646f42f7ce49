// q/k-norm + RoPE + KV-cache write (kernels.h launch_qkv_rope_cache): one pass over a step's qkv rows, q to
// q_out, k and v into the paged cache (E4M3 with a per-head scale for an fp8 cache). Two kernels:
//   - qkv_rope_chunk_kernel, the common shapes (head_dim 8 .. 256 a power of two, rope_dim a multiple of 8, and of
//     16 for rotate-half pairs; 16-byte aligned rows): a lane owns 8 consecutive dims of a head (one 16-byte
//     load of bf16), head_dim / 8 lanes a head, so a warp holds 32 / (head_dim / 8) heads at once. The norm's sum
//     of squares is reduced over the head's lanes, a rotate-half partner's 8 values come from the lane
//     rope_dim / 16 away by shuffles, interleaved pairs lie inside the lane's 8 dims; q and the cache are written
//     8 elements at a time. Each lane takes 2 heads a round, their loads issued together.
//   - qkv_rope_cache_kernel, any other shape: one warp per head, the head's values through shared memory so that
//     a lane can read its pair.
// Both compute cos / sin of position x inv_freq in double once per CTA (as the CPU backend does, for large
// positions), and a head's outputs do not depend on how the launch splits the heads over CTAs.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/storage.cuh"
#include "backend/cuda/warp_reduce.cuh"

namespace mopt::cuda {
namespace {

constexpr int kRopeWarps = 4;
constexpr int kRopeTargetCtas = 2048;  // ~ a full wave of 128-thread CTAs on an H200 (132 SMs x 16)
constexpr int kMaxHeadDim = 256;
constexpr int kChunkHeadsPerLane = 2;  // heads whose loads a lane of the chunk kernel issues together

// A K/V value as stored in a cache of element type C (s: the head's fp8 scale, unused otherwise).
template <class C>
__device__ __forceinline__ C to_cache(float v, float s) {
  if constexpr (std::is_same_v<C, fp8>) {
    return to_e4m3(__fdiv_rn(v, s));
  } else {
    (void)s;
    return from_f32<C>(v);
  }
}

// cos / sin of pos * inv_freq[i] for i < rope_dim / 2 into shared memory (the CTA's threads in turn).
template <class T, class C>
__device__ __forceinline__ void rope_angles(const QkvRopeParamsT<T, C>& p, int pos, float* cos_t, float* sin_t) {
  if (p.inv_freq)
    for (int i = threadIdx.x; i < p.rope_dim / 2; i += blockDim.x) {
      double sd, cd;
      sincos(static_cast<double>(pos) * static_cast<double>(p.inv_freq[i]), &sd, &cd);
      cos_t[i] = static_cast<float>(cd);
      sin_t[i] = static_cast<float>(sd);
    }
}

// Where a K/V head of token slot `slot` goes in the cache, and its fp8 scale (1 otherwise).
template <class T, class C>
__device__ __forceinline__ C* cache_row(const QkvRopeParamsT<T, C>& p, int slot, int kvh, bool is_v, float* scale) {
  const int64_t block = slot / p.cache.block_size, off = slot % p.cache.block_size;
  C* base = is_v ? p.cache.v : p.cache.k;
  *scale = 1.f;
  if constexpr (std::is_same_v<C, fp8>) *scale = is_v ? p.cache.v_scale[kvh] : p.cache.k_scale[kvh];
  return base + block * p.cache.block_stride + (static_cast<int64_t>(kvh) * p.cache.block_size + off) * p.head_dim;
}

// ---- The chunk kernel -----------------------------------------------------------------------------------

// 8 values stored as S at dst (16-byte aligned for bf16 / float, 8-byte for fp8), rounded by to_cache<S>.
template <class S>
__device__ __forceinline__ void store8_cache(S* dst, const float* v, float scale) {
  if constexpr (std::is_same_v<S, fp8>) {
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e / 4] |= static_cast<uint32_t>(to_cache<fp8>(v[e], scale).__x) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
    (void)scale;
    store8(dst, v);
  }
}

// LPH = head_dim / 8 lanes per head. grid (n_tokens, head groups): CTA (t, y) takes the heads
// (y kRopeWarps + warp) HPW + lane / LPH + r stride of token t, r = 0, 1, ... (HPW = 32 / LPH heads per warp,
// stride = gridDim.y kRopeWarps HPW).
template <class T, class C, int LPH>
__global__ void __launch_bounds__(kRopeWarps * 32) qkv_rope_chunk_kernel(QkvRopeParamsT<T, C> p) {
  constexpr int HPW = 32 / LPH, HD = 8 * LPH, R = kChunkHeadsPerLane;
  __shared__ float cos_t[HD / 2], sin_t[HD / 2];
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d0 = 8 * (lane % LPH);  // this lane's dims d0 .. d0 + 7 of its heads
  const int n_heads_all = p.n_head + 2 * p.n_head_kv;
  const T* row = p.qkv + static_cast<int64_t>(t) * n_heads_all * HD;
  const bool scaled = p.row_scale != nullptr;
  const float row_scale = scaled ? p.row_scale[t] : 0.f;
  const int slot = p.slot_mapping[t];
  const int stride = gridDim.y * kRopeWarps * HPW;
  const int warp_first = (blockIdx.y * kRopeWarps + warp) * HPW;  // the warp's first head (uniform)

  // One round: heads h_r = warp_first + lane / LPH + r stride, r < R; every load issued before any is used.
  Raw8<T> raw[R];
  Raw8<float> cs[R];
  auto load_round = [&](int base) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int h = base + lane / LPH + r * stride;
      const bool ok = h < n_heads_all;
      raw[r] = ok ? load8(row + h * HD + d0) : zero8<T>();
      cs[r] = ok && scaled ? load8(p.col_scale + h * HD + d0) : zero8<float>();
    }
  };
  if (warp_first < n_heads_all) load_round(warp_first);  // before the angles: the loads overlap them
  rope_angles(p, p.positions[t], cos_t, sin_t);
  __syncthreads();

  const int half = p.rope_dim / 2;
  // Rotate-half: the lane holding dims d0 +- half of the same head (itself past rope_dim).
  const int partner = !p.neox || d0 >= p.rope_dim ? lane : d0 < half ? lane + half / 8 : lane - half / 8;
  // The rotation of this lane's dims, the same for every head of the token: d = d0 + e becomes
  // v[d] cr[e] + v[pair of d] sr[e] (sr carries the sign: x0 of a pair -> x0 c - x1 s, x1 -> x1 c + x0 s; neox
  // pairs (i, i + half), else (2i, 2i + 1)).
  const bool rotate = p.inv_freq && d0 < p.rope_dim;
  float cr[8], sr[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int f = !rotate ? 0 : p.neox ? d0 % half + e : (d0 + e) / 2;  // frequency index (half may be 0)
    const bool first = p.neox ? d0 < half : e % 2 == 0;
    cr[e] = rotate ? cos_t[f] : 1.f;
    sr[e] = rotate ? (first ? -sin_t[f] : sin_t[f]) : 0.f;
  }
  for (int base = warp_first; base < n_heads_all; base += R * stride) {
    if (base != warp_first) load_round(base);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (base + r * stride >= n_heads_all) break;  // uniform across the warp
      const int h = base + lane / LPH + r * stride;
      const bool valid = h < n_heads_all;  // invalid lanes still take part in the shuffles
      float v[8];
      unpack8(raw[r], v);
      if (scaled) {
        float c[8];
        unpack8(cs[r], c);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] *= row_scale * c[e];  // an FP8 GEMM's scales, epilogue order
      }
      const bool is_q = h < p.n_head, is_v = h >= p.n_head + p.n_head_kv;
      const T* norm_w = !valid ? nullptr : is_q ? p.q_norm : is_v ? nullptr : p.k_norm;
      float ss = 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
      ss = group_sum<LPH>(ss);
      if (norm_w) {
        const float rstd = rsqrtf(ss / static_cast<float>(HD) + p.norm_eps);
        float w[8];
        unpack8(load8(norm_w + d0), w);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = v[e] * rstd * w[e];
      }
      float pv[8];  // the rotate-half partner's values
#pragma unroll
      for (int e = 0; e < 8; ++e) pv[e] = __shfl_sync(0xffffffffu, v[e], partner);
      if (!valid) continue;
      if (!is_v && rotate) {
        float out[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = v[e] * cr[e] + (p.neox ? pv[e] : v[e ^ 1]) * sr[e];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = out[e];
      }
      if (is_q) {
        store8_cache<T>(p.q_out + (static_cast<int64_t>(t) * p.n_head + h) * HD + d0, v, 1.f);
      } else if (slot >= 0) {
        float scale;
        C* dst = cache_row(p, slot, is_v ? h - p.n_head - p.n_head_kv : h - p.n_head, is_v, &scale);
        store8_cache<C>(dst + d0, v, scale);
      }
    }
  }
}

// ---- The general kernel ---------------------------------------------------------------------------------

// One warp per head; the head's values pass through shared memory so RoPE can read each lane's pair.
template <class T, class C>
__global__ void qkv_rope_cache_kernel(QkvRopeParamsT<T, C> p) {
  __shared__ float buf[kRopeWarps][kMaxHeadDim];
  __shared__ float cos_t[kMaxHeadDim / 2], sin_t[kMaxHeadDim / 2];
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = p.head_dim;
  const int n_heads_all = p.n_head + 2 * p.n_head_kv;
  const int row_len = n_heads_all * hd;
  const int slot = p.slot_mapping[t];
  const float row_scale = p.row_scale ? p.row_scale[t] : 0.f;
  float* x = buf[warp];
  rope_angles(p, p.positions[t], cos_t, sin_t);
  __syncthreads();
  // This lane's dims d = lane + 32 i of every head, and their rotation, the same for all heads of the token:
  // rotated = x[d] * rc[i] + x[partner[i]] * rs[i] (rs carries the pair's sign; dims past rope_dim: 1, 0).
  constexpr int kPerLane = kMaxHeadDim / 32;
  float rc[kPerLane], rs[kPerLane];
  int partner[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    rc[i] = 1.f;
    rs[i] = 0.f;
    partner[i] = d;
    if (p.inv_freq && d < p.rope_dim) {
      const int half = p.rope_dim / 2;
      const int f = p.neox ? d % half : d / 2;                    // frequency index
      const bool first = p.neox ? d < half : d % 2 == 0;          // x0 of its pair (x0 c - x1 s), else x1 (x1 c + x0 s)
      partner[i] = p.neox ? (first ? d + half : d - half) : (first ? d + 1 : d - 1);
      rc[i] = cos_t[f];
      rs[i] = first ? -sin_t[f] : sin_t[f];
    }
  }
  // grid.y splits the heads so that a single decode token is spread over several CTAs.
  for (int h = blockIdx.y * kRopeWarps + warp; h < n_heads_all; h += kRopeWarps * gridDim.y) {
    const T* src = p.qkv + static_cast<int64_t>(t) * row_len + static_cast<int64_t>(h) * hd;
    const bool is_q = h < p.n_head;
    const bool is_v = h >= p.n_head + p.n_head_kv;
    const float* col_scale = p.row_scale ? p.col_scale + static_cast<int64_t>(h) * hd : nullptr;
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d >= hd) break;
      float v = to_f32(src[d]);
      if (col_scale) v *= row_scale * col_scale[d];  // an FP8 GEMM's scales, epilogue order
      x[d] = v;
      ss += v * v;
    }
    const T* norm_w = is_q ? p.q_norm : (is_v ? nullptr : p.k_norm);
    if (norm_w) {
      const float rstd = rsqrtf(group_sum<32>(ss) / static_cast<float>(hd) + p.norm_eps);
      for (int d = lane; d < hd; d += 32) x[d] = x[d] * rstd * to_f32(norm_w[d]);
    }
    __syncwarp();
    // Destination of this head: q_out (T) or the cache (C).
    T* qdst = nullptr;
    C* cdst = nullptr;
    float cs = 1.f;  // fp8: the head's scale
    if (is_q) {
      qdst = p.q_out + (static_cast<int64_t>(t) * p.n_head + h) * hd;
    } else {
      if (slot < 0) {
        __syncwarp();
        continue;
      }
      cdst = cache_row(p, slot, is_v ? h - p.n_head - p.n_head_kv : h - p.n_head, is_v, &cs);
    }
    const bool rope = !is_v && p.inv_freq != nullptr;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d >= hd) break;
      float v = x[d];
      if (rope && partner[i] != d) v = v * rc[i] + x[partner[i]] * rs[i];
      if (is_q)
        qdst[d] = from_f32<T>(v);
      else
        cdst[d] = to_cache<C>(v, cs);
    }
    __syncwarp();
  }
}

// Whether the chunk kernel takes p (the shapes and alignments its 8-element loads and stores need).
template <class T, class C>
bool chunk_shape(const QkvRopeParamsT<T, C>& p) {
  const int hd = p.head_dim;
  const bool pow2 = hd >= 8 && hd <= kMaxHeadDim && (hd & (hd - 1)) == 0;
  const bool rope_ok = !p.inv_freq || (p.neox ? p.rope_dim % 16 == 0 : p.rope_dim % 8 == 0);
  const auto a16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const uintptr_t cache_align = std::is_same_v<C, fp8> ? 8 : 16;  // bytes of 8 cache elements' store
  const bool cache_ok = reinterpret_cast<uintptr_t>(p.cache.k) % cache_align == 0 &&
                        reinterpret_cast<uintptr_t>(p.cache.v) % cache_align == 0 && p.cache.block_stride % 8 == 0;
  return pow2 && rope_ok && cache_ok && a16(p.qkv) && a16(p.q_out) && (!p.row_scale || a16(p.col_scale)) &&
         (!p.q_norm || a16(p.q_norm)) && (!p.k_norm || a16(p.k_norm));
}

}  // namespace

template <class T, class C>
cudaError_t launch_qkv_rope_cache(const QkvRopeParamsT<T, C>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  if (p.head_dim > kMaxHeadDim || p.rope_dim > p.head_dim || p.rope_dim % 2 != 0) return cudaErrorInvalidValue;
  if (p.row_scale && !p.col_scale) return cudaErrorInvalidValue;
  if (std::is_same_v<C, fp8> && (p.cache.k_scale == nullptr || p.cache.v_scale == nullptr))
    return cudaErrorInvalidValue;
  const int n_heads_all = p.n_head + 2 * p.n_head_kv;
  const dim3 block(kRopeWarps * 32);
  // A token's heads are split over enough CTAs that a launch has about kRopeTargetCtas CTAs: a decode batch of
  // a few hundred tokens with one CTA per token took ~3x longer than 64 tokens with 12 (H200,
  // docs/cuda_measured.md). Prefills of 2,048 tokens and more keep one CTA per token.
  auto groups = [&](int heads_per_cta) {
    const int max_groups = (n_heads_all + heads_per_cta - 1) / heads_per_cta;
    return std::clamp((kRopeTargetCtas + p.n_tokens - 1) / p.n_tokens, 1, max_groups);
  };
  if (chunk_shape(p)) {
    const int lph = p.head_dim / 8, per_cta = kRopeWarps * (32 / lph);
    const dim3 grid(p.n_tokens, groups(per_cta));
    switch (lph) {
      case 1: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 1>, grid, block, 0, stream, p);
      case 2: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 2>, grid, block, 0, stream, p);
      case 4: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 4>, grid, block, 0, stream, p);
      case 8: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 8>, grid, block, 0, stream, p);
      case 16: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 16>, grid, block, 0, stream, p);
      default: return launch_pdl_decode(qkv_rope_chunk_kernel<T, C, 32>, grid, block, 0, stream, p);
    }
  }
  return launch_pdl_decode(qkv_rope_cache_kernel<T, C>, dim3(p.n_tokens, groups(kRopeWarps)), block, 0, stream, p);
}

template cudaError_t launch_qkv_rope_cache<bf16, bf16>(const QkvRopeParamsT<bf16, bf16>&, cudaStream_t);
template cudaError_t launch_qkv_rope_cache<float, float>(const QkvRopeParamsT<float, float>&, cudaStream_t);
template cudaError_t launch_qkv_rope_cache<bf16, fp8>(const QkvRopeParamsT<bf16, fp8>&, cudaStream_t);

}  // namespace mopt::cuda
