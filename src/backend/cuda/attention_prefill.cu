// Flash-attention prefill / chunked prefill over the paged KV cache (FlashAttention-2 scheme on mma.sync
// m16n8k16 bf16 tensor-core instructions; sm_80+).
//
// Work split. A CTA owns one query tile (up to 64 consecutive query rows of one sequence) for HPC query heads of
// one KV head's group (HPC = 2 when the GQA group is even, else 1): 4 x HPC warps, warp w holding the 16 rows
// 16 (w % 4) .. 16 (w % 4) + 15 of head h0 + w / 4. The CTA walks the sequence's keys in tiles of 64 tokens;
// each K / V tile, gathered once from the paged cache into shared memory, serves all 64 x HPC (row, head) pairs.
// Grid (n_head / HPC, n_tiles) with the tile index reversed: the late (longest, causal) tiles start first.
//
// Pipeline. K and V tiles are double-buffered: tile i + 1 is copied by cp.async (16 bytes a chunk, each thread
// the same chunk column of a few key rows, one block-table look-up per key row for both K and V) while tile i
// is computed; one barrier per tile. An fp8 cache (C = fp8) lands in one raw staging buffer per K and V, which
// each thread converts (the chunks it copied itself) into the tile's bf16 buffer before the barrier; E4M3 ->
// bf16 by bit moves and one multiply by 2^120, exact; k_scale is folded into the softmax scale, v_scale into the
// final normalization.
//
// Per warp and key tile: S = Q K^T (16 x 64, fp32 accumulators), the causal / sliding-window mask by absolute
// position (only on tiles not entirely visible to the warp's rows; tiles entirely invisible are skipped), an
// online softmax in the log2 domain (scale * log2(e) folded into one FMA with the running max), and O += P V
// with P re-packed from the S accumulators as the A operand (no round trip through shared memory).
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, c = lane % 4):
//   A 16x16: a0 = (g, 2c..2c+1)  a1 = (g+8, 2c..)  a2 = (g, 2c+8..)  a3 = (g+8, 2c+8..)
//   B 16x8 (k x n): b0 = (k 2c..2c+1, n g)  b1 = (k 2c+8.., n g)
//   C 16x8: c0,c1 = (g, 2c..2c+1)  c2,c3 = (g+8, 2c..2c+1)
// K^T as B: (k = dim, n = token) is two consecutive dims of one K row: ldmatrix (not transposed) on K rows.
// V as B: (k = token, n = dim) needs a transpose: ldmatrix.trans on rows of V.
#include <type_traits>

#include "backend/cuda/func_attr.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

constexpr int kRows = kPrefillTileRows;  // query rows per tile (16 per warp, 4 warps per head)
constexpr int kWarpsPerHead = kRows / 16;
constexpr int kKvTile = 64;  // keys per iteration
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

// 2^x by the special-function unit, subnormal results flushed to 0 (exp2f's non-ftz form adds a range fix-up
// around every call; probabilities below 2^-126 do not matter next to the row's largest, 1). exp2(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two E4M3 bytes (bits 0-7 and 16-23 of `two`, the rest zero) as a bf16 pair, exactly. Moving sign, exponent
// and mantissa into bf16's fields gives the value times 2^-120 (E4M3's bias 7 read with bf16's 127; E4M3
// subnormals land on bf16 subnormals), and the multiply by 2^120 is exact. NaN (0x7f / 0xff) reads as +-480.
__device__ __forceinline__ uint32_t e4m3x2_spread_to_bf16x2(uint32_t two) {
  const uint32_t bits = ((two & 0x007f007fu) << 4) | ((two & 0x00800080u) << 8);
  const uint32_t two_pow_120 = 0x7b807b80u;  // bf16 2^120 twice
  const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                   *reinterpret_cast<const __nv_bfloat162*>(&two_pow_120));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 16 E4M3 values (one 16-byte chunk) -> 16 bf16 (two 16-byte words) at dst.
__device__ __forceinline__ void e4m3x16_to_bf16(const uint4 w, bf16* dst) {
  const uint32_t in[4] = {w.x, w.y, w.z, w.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = e4m3x2_spread_to_bf16x2(__byte_perm(in[i], 0u, 0x4140));      // bytes 0, 1
    out[2 * i + 1] = e4m3x2_spread_to_bf16x2(__byte_perm(in[i], 0u, 0x4342));  // bytes 2, 3
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(out[0], out[1], out[2], out[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// Shared memory of one CTA (dynamic): bf16 K and V tiles [2 stages][64 keys][HD + 8] (rows padded by 16 bytes:
// conflict-free ldmatrix), then for an fp8 cache the raw E4M3 staging of K and V, [64 keys][HD] bytes each.
template <int HD, class C>
struct PrefillSmem {
  static constexpr int kLd = HD + 8;
  static constexpr int kTileElems = kKvTile * kLd;
  static constexpr size_t kTileBytes = static_cast<size_t>(kTileElems) * sizeof(bf16);
  static constexpr size_t kRawBytes = std::is_same_v<C, fp8> ? static_cast<size_t>(kKvTile) * HD : 0;
  static constexpr size_t kBytes = 4 * kTileBytes + 2 * kRawBytes;
};

template <int HD, int HPC, class C>
__global__ void __launch_bounds__(HPC * kWarpsPerHead * 32, 2 / HPC)
    prefill_attention_kernel(PrefillAttnParamsT<C> p, int group) {
  constexpr bool kFp8 = std::is_same_v<C, fp8>;
  using Smem = PrefillSmem<HD, C>;
  constexpr int LD = Smem::kLd;
  constexpr int kThreads = HPC * kWarpsPerHead * 32;
  constexpr int KSTEPS = HD / 16;
  constexpr int DTILES = HD / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  // Ks(stage) / Vs(stage): [64][LD] bf16; RawK / RawV: [64][HD] E4M3 (fp8 only).
  bf16* const tiles = reinterpret_cast<bf16*>(smem);
  uint8_t* const raw = smem + 4 * Smem::kTileBytes;
  auto Ks = [&](int st) { return tiles + st * Smem::kTileElems; };
  auto Vs = [&](int st) { return tiles + (2 + st) * Smem::kTileElems; };
  pdl_wait();
  pdl_trigger();

  const int tile = p.n_tiles - 1 - static_cast<int>(blockIdx.y);
  const int h0 = blockIdx.x * HPC;
  const int kvh = h0 / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = h0 + warp / kWarpsPerHead, wr = (warp % kWarpsPerHead) * 16;  // this warp's head, first row
  const int g = lane / 4, c = lane % 4;
  const int q_begin = p.tile_start[tile];
  const int q_end = min(p.tile_end[tile], q_begin + kRows);
  const int seq = p.tile_seq[tile];
  const int32_t* bt = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs = p.cache.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;

  // This thread's two rows; the warp's rows (positions of a sequence's tokens are consecutive and increasing).
  const int row_lo = q_begin + wr + g, row_hi = row_lo + 8;
  const bool ok_lo = row_lo < q_end, ok_hi = row_hi < q_end;
  const int pos_lo = ok_lo ? p.positions[row_lo] : -1;
  const int pos_hi = ok_hi ? p.positions[row_hi] : -1;
  const bool warp_active = q_begin + wr < q_end;
  const int warp_min_pos = warp_active ? p.positions[q_begin + wr] : 0;
  const int warp_max_pos = warp_active ? p.positions[min(q_end, q_begin + wr + 16) - 1] : -1;
  // Key range of the whole tile.
  const int tile_max_pos = p.positions[q_end - 1];
  const int tile_min_pos = p.positions[q_begin];
  const int kv_end = tile_max_pos + 1;
  const int kv_begin = p.window > 0 ? max(0, tile_min_pos + 1 - p.window) : 0;
  const int n_kv_tiles = kv_begin < kv_end ? (kv_end - kv_begin + kKvTile - 1) / kKvTile : 0;

  // Q fragments of the warp's 16 rows in registers (bf16 as stored; the scale is applied to S in fp32).
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
  // Running max (already in scaled log2 units) and partial row sums of this thread's two rows.
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  float sc = p.scale * kLog2e, vscale = 1.f;  // fp8: K and V scales of this head (> 0)
  if constexpr (kFp8) {
    sc *= p.cache.k_scale[kvh];
    vscale = p.cache.v_scale[kvh];
  }
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * HD;

  // The gather: a tile is 64 key rows x kRowChunks 16-byte chunks for each of K and V; thread t copies chunk
  // column t % kRowChunks of the key rows t / kRowChunks + i * kRowStep (i < kGatherRows), K and V alike, and
  // zero-fills rows at or past kv_end (their scores are masked; V must be finite: 0 * garbage may be NaN).
  constexpr int kChunkElems = kFp8 ? 16 : 8;  // cache elements per 16-byte chunk
  constexpr int kRowChunks = HD / kChunkElems;
  constexpr int kRowStep = kThreads / kRowChunks;
  constexpr int kGatherRows = kKvTile / kRowStep;
  static_assert(kThreads % kRowChunks == 0 && kKvTile % kRowStep == 0, "whole gather rows");
  const int g_ch = threadIdx.x % kRowChunks, g_row = threadIdx.x / kRowChunks;
  auto chunk_dst = [&](bool is_v, int st, int r) -> void* {
    if constexpr (kFp8) return raw + (is_v ? Smem::kRawBytes : 0) + (r * kRowChunks + g_ch) * 16;
    return (is_v ? Vs(st) : Ks(st)) + r * LD + g_ch * 8;
  };
  auto issue = [&](int j0, int st) {
#pragma unroll
    for (int i = 0; i < kGatherRows; ++i) {
      const int r = g_row + i * kRowStep, j = j0 + r;
      void* dk = chunk_dst(false, st, r);
      void* dv = chunk_dst(true, st, r);
      if (j < kv_end) {
        const int blk = bs_pow2 ? j >> bs_shift : j / bs;
        const int off = j - blk * bs;
        const int64_t src = static_cast<int64_t>(__ldg(bt + blk)) * p.cache.block_stride + head_off +
                            static_cast<int64_t>(off) * HD + g_ch * kChunkElems;
        cp_async16(dk, p.cache.k + src);
        cp_async16(dv, p.cache.v + src);
      } else {
        *static_cast<uint4*>(dk) = make_uint4(0, 0, 0, 0);
        *static_cast<uint4*>(dv) = make_uint4(0, 0, 0, 0);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  // fp8: this thread's raw chunks (its own cp.async writes, visible to it after the wait) into stage st.
  auto convert = [&](int st) {
#pragma unroll
    for (int i = 0; i < kGatherRows; ++i) {
      const int r = g_row + i * kRowStep;
      e4m3x16_to_bf16(*static_cast<const uint4*>(chunk_dst(false, st, r)), Ks(st) + r * LD + g_ch * 16);
      e4m3x16_to_bf16(*static_cast<const uint4*>(chunk_dst(true, st, r)), Vs(st) + r * LD + g_ch * 16);
    }
  };

  if (n_kv_tiles > 0) issue(kv_begin, 0);
  for (int it = 0; it < n_kv_tiles; ++it) {
    const int j0 = kv_begin + it * kKvTile, st = it & 1;
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // the conversion's plain loads stay after it
    // Stage st was last read in iteration it - 2, which every warp finished before the previous barrier.
    if constexpr (kFp8) convert(st);
    // Tile it visible to all; every warp is done with iteration it - 1, so stage st ^ 1 (and, fp8, the raw
    // buffers, each thread's own chunks already converted above) may be overwritten.
    __syncthreads();
    if (it + 1 < n_kv_tiles) issue(j0 + kKvTile, st ^ 1);
    // Nothing of this tile visible to any of the warp's rows: causally after them, or before the window.
    if (!warp_active || j0 > warp_max_pos || (p.window > 0 && j0 + kKvTile - 1 <= warp_min_pos - p.window))
      continue;
    const bf16* K = Ks(st);
    const bf16* V = Vs(st);

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
        ldmatrix_x4(kb, K + (nt * 8 + lane % 8) * LD + ks * 16 + (lane / 8) * 8);
        mma_bf16(s[nt], qa[ks], kb[0], kb[1]);
        mma_bf16(s[nt], qa[ks + 1], kb[2], kb[3]);
      }
    }
    // Mask (unless every key of the tile is visible to every row of the warp), row max of the raw scores.
    const bool all_visible =
        j0 + kKvTile - 1 <= warp_min_pos && (p.window <= 0 || j0 > warp_max_pos - p.window);
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kKvTile / 8; ++nt) {
      if (!all_visible) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + nt * 8 + 2 * c + (e & 1);
          const int pos = e < 2 ? pos_lo : pos_hi;
          if (j > pos || (p.window > 0 && j <= pos - p.window)) s[nt][e] = -INFINITY;
        }
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    // sc > 0, so the max of the scaled scores is sc times the raw max (-inf stays -inf).
    const float mn_lo = fmaxf(m_lo, mx_lo * sc), mn_hi = fmaxf(m_hi, mx_hi * sc);
    // Rows with nothing visible yet keep base 0 so that exp2(-inf - base) = 0, never NaN.
    const float base_lo = mn_lo == -INFINITY ? 0.f : mn_lo;
    const float base_hi = mn_hi == -INFINITY ? 0.f : mn_hi;
    const float corr_lo = exp2_ftz(m_lo - base_lo), corr_hi = exp2_ftz(m_hi - base_hi);
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
      s[nt][0] = exp2_ftz(fmaf(s[nt][0], sc, -base_lo));
      s[nt][1] = exp2_ftz(fmaf(s[nt][1], sc, -base_lo));
      s[nt][2] = exp2_ftz(fmaf(s[nt][2], sc, -base_hi));
      s[nt][3] = exp2_ftz(fmaf(s[nt][3], sc, -base_hi));
      l_lo += s[nt][0] + s[nt][1];
      l_hi += s[nt][2] + s[nt][3];
    }
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
        ldmatrix_x4_trans(vb, V + (kk * 16 + lane % 16) * LD + (dt + lane / 16) * 8);
        mma_bf16(o[dt], pa, vb[0], vb[1]);
        mma_bf16(o[dt + 1], pa, vb[2], vb[3]);
      }
    }
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

// One instantiation's launch; dynamic shared memory above 48 KiB needs the opt-in, set once per device.
template <int HD, int HPC, class C>
cudaError_t launch_heads(const PrefillAttnParamsT<C>& p, int group, cudaStream_t stream) {
  constexpr size_t kSmem = PrefillSmem<HD, C>::kBytes;
  if (const cudaError_t e = set_func_attr_once(reinterpret_cast<const void*>(prefill_attention_kernel<HD, HPC, C>),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem));
      e != cudaSuccess)
    return e;
  const dim3 grid(p.n_head / HPC, p.n_tiles);
  return launch_pdl(prefill_attention_kernel<HD, HPC, C>, grid, dim3(HPC * kWarpsPerHead * 32), kSmem, stream, p,
                    group);
}

template <int HD, class C>
cudaError_t launch_hd(const PrefillAttnParamsT<C>& p, int group, cudaStream_t stream) {
  if (group % 2 == 0) return launch_heads<HD, 2, C>(p, group, stream);
  return launch_heads<HD, 1, C>(p, group, stream);
}

}  // namespace

bool prefill_attention_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

template <class C>
cudaError_t launch_attention_prefill(const PrefillAttnParamsT<C>& p, cudaStream_t stream) {
  if (p.n_tiles <= 0) return cudaSuccess;
  if (!prefill_attention_supported(p.cache.head_dim) || p.cache.n_head_kv <= 0 ||
      p.n_head % p.cache.n_head_kv != 0 || p.n_tiles > 65535 ||
      (std::is_same_v<C, fp8> && (p.cache.k_scale == nullptr || p.cache.v_scale == nullptr)))
    return cudaErrorInvalidValue;
  const int group = p.n_head / p.cache.n_head_kv;
  if (p.cache.head_dim == 64) return launch_hd<64, C>(p, group, stream);
  return launch_hd<128, C>(p, group, stream);
}

template cudaError_t launch_attention_prefill<bf16>(const PrefillAttnParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_attention_prefill<fp8>(const PrefillAttnParamsT<fp8>&, cudaStream_t);

}  // namespace mopt::cuda
