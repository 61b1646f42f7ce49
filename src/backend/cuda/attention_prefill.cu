// Flash-attention prefill / chunked prefill over the paged KV cache (FlashAttention-2 scheme on mma.sync
// m16n8k16 bf16 tensor-core instructions; sm_80+). A CTA of 4 warps owns a tile of 64 query rows of one
// sequence and one query head (each warp 16 rows); it walks the sequence's cached keys in tiles of 64 tokens,
// gathered from the paged cache into shared memory (V(j) while S(j) is computed, K(j+1) while P V(j) is),
// computes S = Q K^T in registers, applies the causal (and sliding-window) mask by absolute position, keeps an
// online softmax per row and accumulates O += P V with P re-packed from the S accumulators as the A operand (no
// round trip through shared memory).
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, c = lane % 4):
//   A 16x16: a0 = (g, 2c..2c+1)  a1 = (g+8, 2c..)  a2 = (g, 2c+8..)  a3 = (g+8, 2c+8..)
//   B 16x8 (k x n): b0 = (k 2c..2c+1, n g)  b1 = (k 2c+8.., n g)
//   C 16x8: c0,c1 = (g, 2c..2c+1)  c2,c3 = (g+8, 2c..2c+1)
// K^T as B: (k = dim, n = token) is two consecutive dims of one K row: ldmatrix (not transposed) on K rows.
// V as B: (k = token, n = dim) needs a transpose: ldmatrix.trans on rows of V.
// fp8 cache (C = fp8): the gather copies the E4M3 bytes (16 a chunk) into a staging buffer and converts them into
// the bf16 tiles (exact: every E4M3 value is a bf16 value); k_scale is folded into the softmax scale, v_scale into
// the final normalization.
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = kPrefillTileRows;  // query rows per CTA (16 per warp)
constexpr int kKvTile = 64;              // keys per iteration
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 8 E4M3 values (one 8-byte word) as 8 bf16 (one 16-byte word), exactly.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 w) {
  const uint32_t in[2] = {w.x, w.y};
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = e4m3x2_to_float2(in[i] & 0xffffu), b = e4m3x2_to_float2(in[i] >> 16);
    out[2 * i] = pack_bf16(a.x, a.y);
    out[2 * i + 1] = pack_bf16(b.x, b.y);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <int HD, class C>
__global__ void __launch_bounds__(kWarps * 32, 3) prefill_attention_kernel(PrefillAttnParamsT<C> p, int group) {
  constexpr bool kFp8 = std::is_same_v<C, fp8>;
  constexpr int LD = HD + 8;  // padded row (16 bytes) -> conflict-free fragment loads
  constexpr int KSTEPS = HD / 16;
  constexpr int DTILES = HD / 8;
  __shared__ __align__(16) bf16 Ks[kKvTile][LD];
  __shared__ __align__(16) bf16 Vs[kKvTile][LD];
  pdl_wait();
  pdl_trigger();

  const int tile = blockIdx.x, h = blockIdx.y;
  const int kvh = h / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int q_begin = p.tile_start[tile];
  const int q_end = min(p.tile_end[tile], q_begin + kRows);
  const int seq = p.tile_seq[tile];
  const int32_t* bt = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs = p.cache.block_size;

  // This thread's two rows.
  const int row_lo = q_begin + warp * 16 + g, row_hi = row_lo + 8;
  const bool ok_lo = row_lo < q_end, ok_hi = row_hi < q_end;
  const int pos_lo = ok_lo ? p.positions[row_lo] : -1;
  const int pos_hi = ok_hi ? p.positions[row_hi] : -1;
  // Key range of the whole tile (positions of a sequence's tokens are consecutive and increasing).
  const int tile_max_pos = p.positions[q_end - 1];
  const int tile_min_pos = p.positions[q_begin];
  const int kv_end = tile_max_pos + 1;
  const int kv_begin = p.window > 0 ? max(0, tile_min_pos + 1 - p.window) : 0;

  // Q fragments in registers, pre-scaled by scale * log2(e) in fp32 before rounding back to bf16
  // would lose precision, so the scale is applied to S instead.
  uint32_t qa[KSTEPS][4];
  {
    const bf16* qlo = p.q + (static_cast<int64_t>(row_lo) * p.n_head + h) * HD;
    const bf16* qhi = p.q + (static_cast<int64_t>(row_hi) * p.n_head + h) * HD;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const int d = ks * 16 + 2 * c;
      qa[ks][0] = ok_lo ? *reinterpret_cast<const uint32_t*>(qlo + d) : 0u;
      qa[ks][1] = ok_hi ? *reinterpret_cast<const uint32_t*>(qhi + d) : 0u;
      qa[ks][2] = ok_lo ? *reinterpret_cast<const uint32_t*>(qlo + d + 8) : 0u;
      qa[ks][3] = ok_hi ? *reinterpret_cast<const uint32_t*>(qhi + d + 8) : 0u;
    }
  }

  float o[DTILES][4];
#pragma unroll
  for (int i = 0; i < DTILES; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  float sc = p.scale * kLog2e, vscale = 1.f;  // fp8: K and V scales of this head
  if constexpr (kFp8) {
    sc *= p.cache.k_scale[kvh];
    vscale = p.cache.v_scale[kvh];
  }
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * HD;

  // Gathering a K or V tile of keys [j0, j0 + kKvTile) (rows past kv_end are zeros) overlaps the other half's
  // compute: V(j) arrives while S = Q K(j)^T and the softmax run, K(j + 1) while O += P V(j), so one buffer
  // each suffices. Both by cp.async, 16 bytes a chunk: bf16 straight into Ks / Vs (finish = wait); fp8 into
  // Raw (never both halves in flight), which finish converts into Ks / Vs, each thread the chunks it copied
  // itself (its own cp.async writes are visible to it after the wait: no barrier needed in between).
  constexpr int kChunkElems = kFp8 ? 16 : 8;  // cache elements per 16-byte chunk
  constexpr int kRowChunks = HD / kChunkElems;
  constexpr int kIters = kKvTile * kRowChunks / (kWarps * 32);  // chunks of a tile per thread
  static_assert(kKvTile * kRowChunks % (kWarps * 32) == 0, "whole gather iterations");
  __shared__ __align__(16) uint8_t Raw[kFp8 ? kKvTile * HD : 16];
  auto issue = [&](const C* base, bf16 (*dst)[LD], int j0) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int idx = threadIdx.x + it * kWarps * 32;
      const int r = idx / kRowChunks, ch = idx % kRowChunks;
      const int j = j0 + r;
      void* to = kFp8 ? static_cast<void*>(&Raw[idx * 16]) : static_cast<void*>(&dst[r][ch * 8]);
      if (j < kv_end)
        cp_async16(to, base + static_cast<int64_t>(bt[j / bs]) * p.cache.block_stride + head_off +
                           static_cast<int64_t>(j % bs) * HD + ch * kChunkElems);
      else
        *static_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  auto finish = [&](bf16 (*dst)[LD]) {
    asm volatile("cp.async.wait_group 0;\n" ::);
    if constexpr (kFp8) {
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int idx = threadIdx.x + it * kWarps * 32;
        const int r = idx / kRowChunks, ch = idx % kRowChunks;
        const uint4 w = *reinterpret_cast<const uint4*>(&Raw[idx * 16]);
        *reinterpret_cast<uint4*>(&dst[r][ch * 16]) = e4m3x8_to_bf16x8(make_uint2(w.x, w.y));
        *reinterpret_cast<uint4*>(&dst[r][ch * 16 + 8]) = e4m3x8_to_bf16x8(make_uint2(w.z, w.w));
      }
    }
  };
  if (kv_begin < kv_end) {
    issue(p.cache.k, Ks, kv_begin);
    finish(Ks);
  }
  __syncthreads();

  for (int j0 = kv_begin; j0 < kv_end; j0 += kKvTile) {
    issue(p.cache.v, Vs, j0);  // Vs is free: every warp passed the previous iteration's last barrier
    // S = Q K^T for this warp's 16 rows x 64 keys.
    // K^T fragments by ldmatrix (non-transposed, rows = keys): lanes 8 q .. 8 q + 7 address keys nt * 8 + 0..7
    // at dims ks * 16 + 8 q (q = 0, 1) and (ks + 1) * 16 + 8 (q - 2) (q = 2, 3): b0, b1 of step ks, then of ks + 1.
    float s[kKvTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kKvTile / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ks += 2) {
        uint32_t kb[4];
        ldmatrix_x4(kb, &Ks[nt * 8 + lane % 8][ks * 16 + (lane / 8) * 8]);
        mma_bf16(s[nt], qa[ks], kb[0], kb[1]);
        mma_bf16(s[nt], qa[ks + 1], kb[2], kb[3]);
      }
    }
    // Mask (unless every key of the tile is visible to every row of the CTA), scale, row max.
    const bool all_visible = j0 + kKvTile - 1 <= tile_min_pos && (p.window <= 0 || j0 > tile_max_pos - p.window);
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kKvTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * c + (e & 1);
        const int pos = e < 2 ? pos_lo : pos_hi;
        const bool ok = all_visible || (j <= pos && (p.window <= 0 || j > pos - p.window));
        s[nt][e] = ok ? s[nt][e] * sc : -INFINITY;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    // Rows with nothing visible yet keep base 0 so that exp2(-inf - base) = 0, never NaN.
    const float base_lo = mn_lo == -INFINITY ? 0.f : mn_lo;
    const float base_hi = mn_hi == -INFINITY ? 0.f : mn_hi;
    const float corr_lo = exp2f(m_lo - base_lo), corr_hi = exp2f(m_hi - base_hi);
    m_lo = mn_lo;
    m_hi = mn_hi;
    l_lo *= corr_lo;
    l_hi *= corr_hi;
#pragma unroll
    for (int i = 0; i < DTILES; ++i) {
      o[i][0] *= corr_lo;
      o[i][1] *= corr_lo;
      o[i][2] *= corr_hi;
      o[i][3] *= corr_hi;
    }
#pragma unroll
    for (int nt = 0; nt < kKvTile / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - base_lo);
      s[nt][1] = exp2f(s[nt][1] - base_lo);
      s[nt][2] = exp2f(s[nt][2] - base_hi);
      s[nt][3] = exp2f(s[nt][3] - base_hi);
      l_lo += s[nt][0] + s[nt][1];
      l_hi += s[nt][2] + s[nt][3];
    }
    finish(Vs);
    __syncthreads();  // V(j) visible; every warp is done with K(j)
    const bool more = j0 + kKvTile < kv_end;
    if (more) issue(p.cache.k, Ks, j0 + kKvTile);
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kKvTile / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < DTILES; dt += 2) {
        // Lanes 0-15 address rows kk*16 + 0..15 at dims dt*8; lanes 16-31 the same rows at dims (dt+1)*8.
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, &Vs[kk * 16 + (lane % 16)][(dt + lane / 16) * 8]);
        mma_bf16(o[dt], pa, vb[0], vb[1]);
        mma_bf16(o[dt + 1], pa, vb[2], vb[3]);
      }
    }
    if (more) finish(Ks);
    __syncthreads();  // K(j + 1) visible; every warp is done with V(j)
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f;
  float inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
  if constexpr (kFp8) {
    inv_lo *= vscale;
    inv_hi *= vscale;
  }
  bf16* olo = p.out + (static_cast<int64_t>(row_lo) * p.n_head + h) * HD;
  bf16* ohi = p.out + (static_cast<int64_t>(row_hi) * p.n_head + h) * HD;
#pragma unroll
  for (int dt = 0; dt < DTILES; ++dt) {
    const int d = dt * 8 + 2 * c;
    if (ok_lo)
      *reinterpret_cast<__nv_bfloat162*>(olo + d) = __floats2bfloat162_rn(o[dt][0] * inv_lo, o[dt][1] * inv_lo);
    if (ok_hi)
      *reinterpret_cast<__nv_bfloat162*>(ohi + d) = __floats2bfloat162_rn(o[dt][2] * inv_hi, o[dt][3] * inv_hi);
  }
}

}  // namespace

bool prefill_attention_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

template <class C>
cudaError_t launch_attention_prefill(const PrefillAttnParamsT<C>& p, cudaStream_t stream) {
  if (p.n_tiles <= 0) return cudaSuccess;
  if (!prefill_attention_supported(p.cache.head_dim) || p.cache.n_head_kv <= 0 ||
      p.n_head % p.cache.n_head_kv != 0 ||
      (std::is_same_v<C, fp8> && (p.cache.k_scale == nullptr || p.cache.v_scale == nullptr)))
    return cudaErrorInvalidValue;
  const int group = p.n_head / p.cache.n_head_kv;
  const dim3 grid(p.n_tiles, p.n_head);
  if (p.cache.head_dim == 64)
    return launch_pdl(prefill_attention_kernel<64, C>, grid, dim3(kWarps * 32), 0, stream, p, group);
  return launch_pdl(prefill_attention_kernel<128, C>, grid, dim3(kWarps * 32), 0, stream, p, group);
}

template cudaError_t launch_attention_prefill<bf16>(const PrefillAttnParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_attention_prefill<fp8>(const PrefillAttnParamsT<fp8>&, cudaStream_t);

}  // namespace mopt::cuda
