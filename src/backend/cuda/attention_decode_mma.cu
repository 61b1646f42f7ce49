// Decode attention on the tensor cores: head_dim 128, a bf16 or fp8 (E4M3) cache, bf16 q and out. The grid,
// splits, merge (finish_cta), scales and PDL are those of the per-lane kernel (attention_decode.cu), which keeps
// the other head dims and the small shared-memory configuration of the fused decode step (<= 2 heads per CTA).
// Each of the CTA's 4 warps takes 16 tokens of every 64-token tile and computes S = Q K^T and O += P V with
// mma.sync m16n8k16 (fp32 accumulation; the CTA's <= 8 query heads padded to the 16 rows); P stays in registers
// (the S accumulator layout is P's A layout). Per cache type (MmaKv):
//   - fp8: f16 mma inputs; E4M3 pairs converted with cvt.rn.f16x2.e4m3x2 (exact); q * scale * log2(e) rounded to
//     f16 (relative 2^-11; clamped to f16's finite range, which only |q| above ~5e5 at scale 1/sqrt(128)
//     reaches), the scores scaled by k_scale in fp32, v_scale applied to the output; P rounded to f16 (relative
//     2^-11). 3 stages of 16 KiB, 4 CTAs per SM.
//   - bf16: bf16 mma inputs; q and K are used as stored (products exact), the scores scaled by scale * log2(e) in
//     fp32; P split into bf16 hi + lo parts (two mma, relative error ~2^-17: as good as the fp32 probabilities
//     of the per-lane kernel). 3 stages of 32 KiB, 2 CTAs per SM (the same 128 KiB in flight per SM as fp8).
// In both, softmax and every sum are fp32 (l sums the fp32 probabilities).
//
// Layout (both types; R = row bytes = 128 fp8 / 256 bf16, NC = R / 16 chunks of 16 bytes a row):
//   - Warp w is the only reader and writer of its region of each stage (K rows 0..15 then V rows 0..15 of its 16
//     tokens), so the loop synchronizes with __syncwarp only. Copies: NC lanes take the NC chunks of one row, so
//     each cp.async.cg instruction moves 32 / NC whole rows (every sector fully used), zero-filled past the slice.
//   - Chunk j of row r is stored at chunk swz(r, j) of that row (an XOR swizzle within the row): the copies' stores
//     and the fragment loads below are free of bank conflicts (each quarter warp's 8 16-byte loads hit 8 different
//     chunk columns mod 8).
//   - S = Q K^T, lane (g = lane / 4, c = lane % 4): the head_dim reduction is permuted so that lane c's k slots of
//     k-step s are the dims c * 32 + 4 s .. + 3 (b0: + 0, + 1; b1: + 2, + 3), and q uses the same permutation;
//     n-tile n holds tokens n * 8 .. + 7 (this lane reads K row g + 8 n: fp8 chunks 2c, 2c + 1; bf16 chunks
//     4c .. 4c + 3).
//   - O = P V: the output dims are permuted, column n of n-tile j is dim n * 16 + j, so lane g reads dims
//     g * 16 .. + 15 (fp8: chunk g; bf16: chunks 2g, 2g + 1) of token rows 2c, 2c + 1, 2c + 8, 2c + 9 and pairs
//     the two rows' values with byte permutes.
//   - Combine buffer (after the loop, reusing the pipeline): per warp and head a row of kAccStride floats; lane
//     (g, c) stores its 32 outputs in an order rotated by c (index j ^ 8 (c / 2), column e ^ (c % 2)) so that each
//     store's 32 addresses fall in 32 different banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/attention_decode_common.cuh"
#include "backend/cuda/func_attr.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_formats.cuh"

namespace mopt::cuda::decode_attn {
namespace {

constexpr int kHeadDim = 128;
constexpr int kStages = 3;                                 // 2 tiles in flight while one is consumed
constexpr int kWarps = kThreads / 32;
constexpr int kWarpTokens = 16;                            // one k-step of P.V per warp and tile
constexpr int kTileTokens = kWarps * kWarpTokens;          // 64 per CTA
constexpr int kAccStride = kHeadDim + 1;                   // floats per head row of the combine buffer
constexpr int kCombineBytes = kWarps * kMaxHeadsPerCta * (2 + kAccStride) * 4;  // 16.4 KiB
constexpr int kQBytes = 32 * 16 * 4;                       // q's A fragments, after the pipeline: 2 KiB

// d0, d1 += A . B on m16n8k16 (fp32 accumulate; f16 or bf16 inputs) where only rows 0..7 of A are real (a0: row
// g, k 2c and 2c+1; a2: row g, k 2c+8 and 2c+9; rows 8..15 zero): d0, d1 are row g, columns 2c and 2c+1; b0: k 2c,
// 2c+1 of column g, b1: k 2c+8, 2c+9.
template <bool BF16>
__device__ __forceinline__ void mma_rows8(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float d2 = 0.f, d3 = 0.f;  // rows 8..15: stay zero, unused
  if constexpr (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

template <class C>
struct MmaKv;

template <>
struct MmaKv<fp8> {
  static constexpr bool kBf16 = false;
  static constexpr int kChunks = 8;     // 16-byte chunks a row
  static constexpr int kMinBlocks = 4;  // CTAs per SM
  __device__ static int swz(int r, int j) { return j ^ (r & 7); }
  // K fragments of this lane (row g + 8 n of the warp's K region; see the header) for the 8 k-steps.
  template <class At>
  __device__ static void k_frags(At at, const uint32_t (&off)[4], uint32_t so, int n, uint32_t (&b)[8][2]) {
    const uint4 k0 = *at(so + off[2 * n]), k1 = *at(so + off[2 * n + 1]);  // chunks 2c, 2c + 1
    const uint32_t kw[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
    for (int s = 0; s < 8; ++s) e4m3x4_to_f16x2(kw[s], b[s][0], b[s][1]);
  }
  // V fragments of the 16 n-tiles: rows 2c (a), 2c + 1 (b), 2c + 8 (c), 2c + 9 (d), chunk g: bytes 4 w .. 4 w + 3
  // of each -> n-tiles 4 w .. 4 w + 3.
  template <class At>
  __device__ static void v_frags(At at, const uint32_t (&off)[4], uint32_t so, uint32_t (&b0)[16],
                                 uint32_t (&b1)[16]) {
    const uint4 va = *at(so + off[0]), vb = *at(so + off[1]), vc = *at(so + off[2]), vd = *at(so + off[3]);
    const uint32_t ra[4] = {va.x, va.y, va.z, va.w}, rb[4] = {vb.x, vb.y, vb.z, vb.w};
    const uint32_t rc[4] = {vc.x, vc.y, vc.z, vc.w}, rd[4] = {vd.x, vd.y, vd.z, vd.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      e4m3x4_to_f16x2(__byte_perm(ra[w], rb[w], 0x5140), b0[4 * w], b0[4 * w + 1]);  // bytes a0 b0 a1 b1
      e4m3x4_to_f16x2(__byte_perm(ra[w], rb[w], 0x7362), b0[4 * w + 2], b0[4 * w + 3]);  // bytes a2 b2 a3 b3
      e4m3x4_to_f16x2(__byte_perm(rc[w], rd[w], 0x5140), b1[4 * w], b1[4 * w + 1]);
      e4m3x4_to_f16x2(__byte_perm(rc[w], rd[w], 0x7362), b1[4 * w + 2], b1[4 * w + 3]);
    }
  }
};

template <>
struct MmaKv<bf16> {
  static constexpr bool kBf16 = true;
  static constexpr int kChunks = 16;
  static constexpr int kMinBlocks = 2;
  // Bits 0..2 of the chunk index XORed with (bit 3 of j) ^ (bit 1 of r), bit 0 of r, bit 2 of r: the K loads of a
  // quarter warp (rows g0, g0 + 1, chunks 4c + x) and the V loads (rows 2c + z, chunks 2 g + y, g = g0, g0 + 1)
  // then cover the 8 chunk columns mod 8.
  __device__ static int swz(int r, int j) {
    return j ^ ((((j >> 3) ^ (r >> 1)) & 1) | ((r & 1) << 1) | (r & 4));
  }
  template <class At>
  __device__ static void k_frags(At at, const uint32_t (&off)[8], uint32_t so, int n, uint32_t (&b)[8][2]) {
#pragma unroll
    for (int x = 0; x < 4; ++x) {  // chunk 4c + x: dims c * 32 + 8 x .. + 7 = k-steps 2 x, 2 x + 1
      const uint4 k = *at(so + off[4 * n + x]);
      b[2 * x][0] = k.x;
      b[2 * x][1] = k.y;
      b[2 * x + 1][0] = k.z;
      b[2 * x + 1][1] = k.w;
    }
  }
  // off: rows 2c, 2c + 1, 2c + 8, 2c + 9 at chunk 2g (0..3), then at chunk 2g + 1 (4..7). n-tile j = 8 h + 2 w + e
  // is word w of chunk 2g + h, element e: the two rows' bf16 values paired by one byte permute.
  template <class At>
  __device__ static void v_frags(At at, const uint32_t (&off)[8], uint32_t so, uint32_t (&b0)[16],
                                 uint32_t (&b1)[16]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 va = *at(so + off[4 * h]), vb = *at(so + off[4 * h + 1]);
      const uint4 vc = *at(so + off[4 * h + 2]), vd = *at(so + off[4 * h + 3]);
      const uint32_t ra[4] = {va.x, va.y, va.z, va.w}, rb[4] = {vb.x, vb.y, vb.z, vb.w};
      const uint32_t rc[4] = {vc.x, vc.y, vc.z, vc.w}, rd[4] = {vd.x, vd.y, vd.z, vd.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        b0[8 * h + 2 * w] = __byte_perm(ra[w], rb[w], 0x5410);  // element 0 of both rows
        b0[8 * h + 2 * w + 1] = __byte_perm(ra[w], rb[w], 0x7632);
        b1[8 * h + 2 * w] = __byte_perm(rc[w], rd[w], 0x5410);
        b1[8 * h + 2 * w + 1] = __byte_perm(rc[w], rd[w], 0x7632);
      }
    }
  }
};

template <class C>
struct MmaGeom {
  static constexpr int kRowBytes = MmaKv<C>::kChunks * 16;
  static constexpr int kVBytes = kWarpTokens * kRowBytes;             // a warp's K (or V) rows in a stage
  static constexpr int kStageBytes = kWarps * 2 * kVBytes;            // fp8 16 KiB, bf16 32 KiB
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kSmemBytes = (kPipeBytes > kCombineBytes ? kPipeBytes : kCombineBytes) + kQBytes;
  static constexpr int kRowsPerCopy = 32 / MmaKv<C>::kChunks;         // rows a cp.async instruction covers
  static constexpr int kCopies = kWarpTokens / kRowsPerCopy;          // per lane, for K and again for V
  static constexpr int kKOffs = MmaKv<C>::kBf16 ? 8 : 4, kVOffs = MmaKv<C>::kBf16 ? 8 : 4;
};
static_assert(kCombineBytes <= MmaGeom<fp8>::kPipeBytes, "the combine buffer reuses the pipeline's shared memory");

template <class C>
__global__ void __launch_bounds__(kThreads, MmaKv<C>::kMinBlocks)
    decode_attention_mma_kernel(DecodeAttnParamsT<bf16, C> p, int heads_per_cta, int group) {
  using Kv = MmaKv<C>;
  using G = MmaGeom<C>;
  constexpr bool kBf16 = Kv::kBf16;
  constexpr int HD = kHeadDim, GT = kMaxHeadsPerCta, NSUB = kWarps, S = kStages, NC = Kv::kChunks;
  extern __shared__ __align__(16) unsigned char smem[];  // G::kSmemBytes
  pdl_wait();
  pdl_trigger();

  const CtaWork work = cta_work(p, heads_per_cta, group);
  const int t = work.t, h0 = work.h0, kvh = work.kvh, split = work.split;
  const int used = work.slice.used, s0 = work.slice.s0, s1 = work.slice.s1;
  if (split >= used) return;  // uniform across the CTA
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  float score_scale = p.scale * kLog2e, vscale = 1.f;  // bf16: q as stored; fp8: folded into q below
  if constexpr (!kBf16) {
    score_scale = p.cache.k_scale[kvh];
    vscale = p.cache.v_scale[kvh];
  }

  // q of head g (zero for padding rows g >= heads_per_cta): k-step s holds dims c * 32 + 4 s, + 1 | + 2, + 3, i.e.
  // lane c's 16 words are dims c * 32 .. + 31 in order. The same A fragments serve every warp: warp 0 builds them
  // once into shared memory (uint4 v * 32 + lane = words 4 v .. 4 v + 3), read back per tile rather than held
  // across the loop (16 registers fewer).
  uint4* q_frag = reinterpret_cast<uint4*>(smem + G::kPipeBytes);  // [4][32]
  if (warp == 0) {
    const bool real = g < heads_per_cta;
    const bf16* qrow = p.q + (static_cast<int64_t>(t) * p.n_head + h0 + (real ? g : 0)) * HD + c * 32;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if constexpr (kBf16) {
        if (real) x = *reinterpret_cast<const uint4*>(qrow + v * 8);
      } else {
        const float qs = p.scale * kLog2e;
        float f[8];
        unpack8(load8(qrow + v * 8), f);
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float x0 = real ? fminf(fmaxf(f[2 * i] * qs, -65504.f), 65504.f) : 0.f;  // f16's finite range
          const float x1 = real ? fminf(fmaxf(f[2 * i + 1] * qs, -65504.f), 65504.f) : 0.f;
          const __half2 h = __floats2half2_rn(x0, x1);
          w[i] = *reinterpret_cast<const uint32_t*>(&h);
        }
        x = make_uint4(w[0], w[1], w[2], w[3]);
      }
      q_frag[v * 32 + lane] = x;
    }
  }
  __syncthreads();

  const int bs = p.cache.block_size;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * HD;
  auto at = [&](uint32_t byte_off) -> uint4* { return reinterpret_cast<uint4*>(smem + byte_off); };
  // Byte offset in stage 0 of chunk j of row r of this warp's K (kv 0) or V (kv 1) region.
  const uint32_t wbase = warp * 2 * G::kVBytes;
  auto slot = [&](int kv, int r, int j) -> uint32_t {
    return wbase + kv * G::kVBytes + r * G::kRowBytes + Kv::swz(r, j) * 16;
  };
  // This lane's copies: chunk jc of rows rc0 + kRowsPerCopy k; its fragment loads (see the header).
  const int rc0 = lane / NC, jc = lane % NC;
  uint32_t st_off[G::kCopies], k_off[G::kKOffs], v_off[G::kVOffs];
#pragma unroll
  for (int k = 0; k < G::kCopies; ++k) st_off[k] = slot(0, rc0 + G::kRowsPerCopy * k, jc);
  if constexpr (kBf16) {
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int x = 0; x < 4; ++x) k_off[4 * n + x] = slot(0, g + 8 * n, 4 * c + x);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      v_off[4 * h] = slot(1, 2 * c, 2 * g + h);
      v_off[4 * h + 1] = slot(1, 2 * c + 1, 2 * g + h);
      v_off[4 * h + 2] = slot(1, 2 * c + 8, 2 * g + h);
      v_off[4 * h + 3] = slot(1, 2 * c + 9, 2 * g + h);
    }
  } else {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      k_off[2 * n] = slot(0, g + 8 * n, 2 * c);
      k_off[2 * n + 1] = slot(0, g + 8 * n, 2 * c + 1);
    }
    v_off[0] = slot(1, 2 * c, g);
    v_off[1] = slot(1, 2 * c + 1, g);
    v_off[2] = slot(1, 2 * c + 8, g);
    v_off[3] = slot(1, 2 * c + 9, g);
  }
  // Copies of tile `tile` into stage `stage`. One division per tile: the block of a row is found by stepping from
  // that of the first one; block table entries are read only for rows in the slice.
  const char* kbase = reinterpret_cast<const char*>(p.cache.k);
  const char* vbase = reinterpret_cast<const char*>(p.cache.v);
  auto issue = [&](int tile, int stage) {
    const int first = s0 + tile * kTileTokens + warp * kWarpTokens + rc0;
    int blk = first / bs, r = first - blk * bs;
    int64_t off[G::kCopies];  // bytes
    bool ok[G::kCopies];
#pragma unroll
    for (int k = 0; k < G::kCopies; ++k) {
      ok[k] = first + G::kRowsPerCopy * k < s1;
      off[k] = ok[k] ? (static_cast<int64_t>(bt[blk]) * p.cache.block_stride + head_off +
                        static_cast<int64_t>(r) * HD) * static_cast<int64_t>(sizeof(C)) + jc * 16
                     : 0;
      r += G::kRowsPerCopy;
      while (r >= bs) {
        r -= bs;
        ++blk;
      }
    }
    const uint32_t so = stage * G::kStageBytes;
#pragma unroll
    for (int k = 0; k < G::kCopies; ++k) {
      cp_async<16>(at(so + st_off[k]), kbase + off[k], ok[k]);
      cp_async<16>(at(so + st_off[k] + G::kVBytes), vbase + off[k], ok[k]);
    }
  };

  float o[HD / 8][2];  // n-tile j: head g, dims (2c) * 16 + j and (2c + 1) * 16 + j (unnormalized)
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = 0.f;
  float m = -INFINITY, l = 0.f;  // head g: running max (log2 domain); l: this lane's share of the sum

  const int n_tiles = (s1 - s0 + kTileTokens - 1) / kTileTokens;
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {  // prologue: tiles 0 .. S-2 in flight (one commit group each, maybe empty)
    if (i < n_tiles) issue(i, i);
    cp_async_commit();
  }
  int stage = 0;  // = i % S
  for (int i = 0; i < n_tiles; ++i) {
    // Groups 0 .. i are complete (S - 1 + i committed): tile i is in shared memory; after the __syncwarp it is
    // visible to the whole warp, and every lane is done reading stage (i - 1) % S, which is refilled next.
    cp_async_wait<S - 2>();
    __syncwarp();
    if (i + S - 1 < n_tiles) issue(i + S - 1, stage == 0 ? S - 1 : stage - 1);
    cp_async_commit();
    const uint32_t so = stage * G::kStageBytes;  // tile i's stage
    stage = stage == S - 1 ? 0 : stage + 1;
    const int base = s0 + i * kTileTokens + warp * kWarpTokens;
    if (base >= s1) continue;  // uniform across the warp: none of its 16 tokens is in the slice

    // Scores of tokens n * 8 + 2c + e (log2 domain; -inf past s1).
    float sc[2][2];
    float mx = -INFINITY;
    uint32_t qa[8][2];
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const uint4 x = q_frag[v * 32 + lane];
      qa[2 * v][0] = x.x;
      qa[2 * v][1] = x.y;
      qa[2 * v + 1][0] = x.z;
      qa[2 * v + 1][1] = x.w;
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      uint32_t kb[8][2];
      Kv::k_frags(at, k_off, so, n, kb);
      sc[n][0] = sc[n][1] = 0.f;
#pragma unroll
      for (int s = 0; s < 8; ++s) mma_rows8<kBf16>(sc[n][0], sc[n][1], qa[s][0], qa[s][1], kb[s][0], kb[s][1]);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[n][e] = base + n * 8 + 2 * c + e < s1 ? sc[n][e] * score_scale : -INFINITY;
        mx = fmaxf(mx, sc[n][e]);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // Token `base` is in the slice, so mx (over the 4 lanes of row g) is finite.
    const float m_new = fmaxf(m, mx);
    const float corr = exp2f(m - m_new);  // m = -inf: 0
    m = m_new;
    float pr[2][2], ps = 0.f;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        pr[n][e] = exp2f(sc[n][e] - m_new);
        ps += pr[n][e];
      }
    l = l * corr + ps;
    // P as the A fragments of O += P V (a0: tokens 2c, 2c + 1 = n-tile 0; a2: n-tile 1); bf16: hi and lo parts.
    uint32_t pa0, pa2, pl0 = 0u, pl2 = 0u;
    if constexpr (kBf16) {
      const __nv_bfloat162 h0v = __floats2bfloat162_rn(pr[0][0], pr[0][1]);
      const __nv_bfloat162 h1v = __floats2bfloat162_rn(pr[1][0], pr[1][1]);
      const float2 f0 = __bfloat1622float2(h0v), f1 = __bfloat1622float2(h1v);
      const __nv_bfloat162 l0v = __floats2bfloat162_rn(pr[0][0] - f0.x, pr[0][1] - f0.y);
      const __nv_bfloat162 l1v = __floats2bfloat162_rn(pr[1][0] - f1.x, pr[1][1] - f1.y);
      pa0 = *reinterpret_cast<const uint32_t*>(&h0v);
      pa2 = *reinterpret_cast<const uint32_t*>(&h1v);
      pl0 = *reinterpret_cast<const uint32_t*>(&l0v);
      pl2 = *reinterpret_cast<const uint32_t*>(&l1v);
    } else {
      const __half2 p0 = __floats2half2_rn(pr[0][0], pr[0][1]), p1 = __floats2half2_rn(pr[1][0], pr[1][1]);
      pa0 = *reinterpret_cast<const uint32_t*>(&p0);
      pa2 = *reinterpret_cast<const uint32_t*>(&p1);
    }

    uint32_t vb0[16], vb1[16];
    Kv::v_frags(at, v_off, so, vb0, vb1);
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      o[j][0] *= corr;
      o[j][1] *= corr;
      mma_rows8<kBf16>(o[j][0], o[j][1], pa0, pa2, vb0[j], vb1[j]);
      if constexpr (kBf16) mma_rows8<true>(o[j][0], o[j][1], pl0, pl2, vb0[j], vb1[j]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the combine buffer

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* sm_m = reinterpret_cast<float*>(smem);  // [NSUB][GT]
  float* sm_l = sm_m + NSUB * GT;                // [NSUB][GT]
  float* sm_acc = sm_l + NSUB * GT;              // [NSUB][GT][kAccStride]
  if (g < heads_per_cta) {
    if (c == 0) {
      sm_m[warp * GT + g] = m;
      sm_l[warp * GT + g] = l;
    }
    // Store (j, e) of lane c writes o[jj][ee], jj = j ^ 8 (c / 2), ee = e ^ (c % 2): its bank is (8 warp + g +
    // 16 ee + jj) % 32, and the four c of one g take jj + 16 ee + {0, 8, 16, 24} (mod 32).
    const bool hi = c >= 2, odd = c % 2 != 0;
    float* row = sm_acc + (warp * GT + g) * kAccStride;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x0 = hi ? o[j ^ 8][0] : o[j][0], x1 = hi ? o[j ^ 8][1] : o[j][1];
        const int jj = hi ? j ^ 8 : j, ee = odd ? e ^ 1 : e;
        row[(2 * c + ee) * 16 + jj] = (ee == 0) ? x0 : x1;
      }
  }
  __syncthreads();
  finish_cta<bf16, C, NSUB, GT, HD, kAccStride>(p, sm_m, heads_per_cta, t, h0, split, used, vscale);
}

}  // namespace

// Dynamic shared memory above 48 KiB needs the opt-in, and the largest shared-memory carveout lets 4 (fp8) or 2
// (bf16) CTAs fit an SM; both are set once per device (func_attr.h).
template <class C>
cudaError_t launch_mma(const DecodeAttnParamsT<bf16, C>& p, int hpc, int group, dim3 grid, cudaStream_t stream) {
  constexpr int kSmem = MmaGeom<C>::kSmemBytes;
  const void* kernel = reinterpret_cast<const void*>(decode_attention_mma_kernel<C>);
  if (const cudaError_t e = set_func_attr_once(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      e != cudaSuccess)
    return e;
  if (const cudaError_t e = set_func_attr_once(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                               cudaSharedmemCarveoutMaxShared);
      e != cudaSuccess)
    return e;
  return launch_pdl(decode_attention_mma_kernel<C>, grid, dim3(kThreads), kSmem, stream, p, hpc, group);
}

template cudaError_t launch_mma<fp8>(const DecodeAttnParamsT<bf16, fp8>&, int, int, dim3, cudaStream_t);
template cudaError_t launch_mma<bf16>(const DecodeAttnParamsT<bf16, bf16>&, int, int, dim3, cudaStream_t);

}  // namespace mopt::cuda::decode_attn
