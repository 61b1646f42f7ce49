// Paged attention with one query token per work item: decode steps, and prefill for head dims that have no
// tensor-core kernel. GQA-aware (a CTA serves up to 8 query heads of one KV head, so each K/V row is read once
// for the group). One launch per layer, graph-safe:
//   - split-K: grid (n_tokens, head groups, n_splits); n_splits is a launch parameter (frozen per CUDA graph
//     bucket), but token t uses only decode_splits_used(its context, n_splits) of them (slices of at least
//     kDecodeMinSliceTokens cached tokens), derived on the device from positions[t]; the other CTAs exit at once.
//   - one split used: the CTA writes the output directly. Several: each writes its partial state (normalized
//     output, max, sum) to the workspace and takes a ticket from the counter of its (token, head group); the
//     last one merges the partials into the output and resets the counter to 0, so launches and graph replays
//     repeat without a memset.
//
// Threads: a group of LANES = HEAD_DIM / 8 lanes handles one cached token at a time, each lane holding 8
// consecutive dims (one 16-byte word of K and of V for bf16, two for fp32); the CTA's NSUB = 128 / LANES groups
// take consecutive tokens (coalesced). K/V stream through a 4-stage cp.async pipeline in shared memory (tiles
// of U tokens per group, 3 tiles in flight while one is consumed); each thread copies and later reads only its
// own slots, so the loop needs no barrier. A token's GT partial dot products (one per query head) are
// reduce-scattered over its LANES lanes (reduce_scatter: log2(min(GT, LANES)) halving exchanges, then a butterfly
// over what is left), so each lane finishes the scores and the online softmax of its own heads only (state
// rescaled once per tile) and hands each head's probabilities to the other lanes with one shuffle: fewer
// shuffles and exp2 than a butterfly per head (GT = 4, head_dim 128: 9 shuffles and 1 exp2 per token and lane
// instead of 16 and 4), which matters at large batch, where the loop is nearly issue-bound. The NSUB states are
// combined through shared memory at the end.
// Templated on the storage type T of q and out (bf16 or float) and C of the cache (T, or fp8 with T = bf16:
// 8-byte copies per 8 elements, decoded in registers; k_scale is folded into q and v_scale into the output);
// softmax and accumulation are fp32.
// fp8 cache with head_dim 128 (except the small-smem configuration with <= 2 heads per CTA, which keeps the
// per-lane kernel): decode_attention_fp8_mma_kernel, the same grid, splits, merge (finish_cta), scales and PDL,
// but the dot products on the tensor cores: each warp takes 16 tokens of every 64-token tile and computes
// S = Q K^T and O += P V with mma.sync m16n8k16 (f16 inputs, fp32 accumulation; the CTA's <= 8 heads padded to
// the 16 rows), E4M3 pairs converted with cvt.rn.f16x2.e4m3x2, P kept in registers (the S accumulator layout is
// P's A layout); layouts, copies and the numeric bounds are described at the kernel.
// Alignment: every 8-element group starts at a multiple of 8 elements from a 256-byte aligned allocation
// (head_dim is a multiple of 8), so the 8-byte (fp8) / 16-byte (bf16) / 32-byte (fp32) copies are aligned.
#include <cfloat>
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_formats.cuh"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

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

// Pipeline geometry per cache type C: a tile is U cached tokens per subgroup (NSUB * U per CTA); kStages tiles
// are in shared memory at once (kStages - 1 in flight while one is consumed). A stage is
// U * 2 (K, V) * W * kThreads words (Word: 16 bytes, 8 for fp8) = 8 KiB for bf16 (U 2, W 1), fp32 (U 1, W 2)
// and fp8 (U 4, W 1 of 8 bytes).
// SMALL (DecodeAttnParamsT::small_smem): 3 stages of 4 KiB (U 1, fp8 U 2), 12 KiB, so that 2 CTAs fit the 32 KiB
// configuration of the fused decode step.
template <class C, bool SMALL>
struct DecodeTile {
  using Word = typename Raw8<C>::Word;
  static constexpr int W = sizeof(C) == 4 ? 2 : 1;  // words per 8-element group
  static constexpr int U = sizeof(C) == 1 ? (SMALL ? 2 : 4) : sizeof(C) == 2 && !SMALL ? 2 : 1;
  static constexpr int kStages = SMALL ? 3 : 4;
  static constexpr int kWords = kStages * U * 2 * W * kThreads;
  static constexpr int kBytes = kWords * static_cast<int>(sizeof(Word));
};

// Reduce-scatter of the GT values v[g] (this lane's partial sums, one per head) over the LANES lanes of a subgroup
// (sl = lane within it). With R = min(GT, LANES) and NH = GT / R, on exit v[0 .. NH) hold the complete sums of
// heads blk * NH + j, blk = sl / (LANES / R): each halving step K (partner at offset LANES >> (K + 1)) keeps the
// upper half of the values when the lane's bit is set, the lower half otherwise, and adds the partner's copy of
// the kept half; then a butterfly over the offsets below LANES / R completes the NH sums on every lane of a block.
template <int GT, int LANES, int K = 0>
__device__ __forceinline__ void reduce_scatter(float (&v)[GT], int sl) {
  constexpr int R = GT < LANES ? GT : LANES;
  if constexpr ((1 << K) < R) {
    constexpr int o = LANES >> (K + 1), half = GT >> (K + 1);
    const bool up = (sl & o) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float keep = up ? v[i + half] : v[i];
      const float send = up ? v[i] : v[i + half];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
    reduce_scatter<GT, LANES, K + 1>(v, sl);
  } else {
#pragma unroll
    for (int o = LANES / R / 2; o > 0; o >>= 1)
#pragma unroll
      for (int j = 0; j < GT / R; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], o);
  }
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

template <class T, class C, int HD, int GT, bool SMALL>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(DecodeAttnParamsT<T, C> p, int heads_per_cta,
                                                                    int group) {
  using Tile = DecodeTile<C, SMALL>;
  using Word = typename Tile::Word;
  constexpr bool kFp8 = std::is_same_v<C, fp8>;
  constexpr int U = Tile::U, W = Tile::W, S = Tile::kStages;
  constexpr int LANES = HD / 8;
  constexpr int NSUB = kThreads / LANES;
  constexpr int kTileTokens = NSUB * U;
  // After reduce_scatter: NH heads per lane; head g lives on lane (g / NH) * kOwner of each subgroup.
  constexpr int R = GT < LANES ? GT : LANES, NH = GT / R, kOwner = LANES / R;
  // Shared memory: the K/V pipeline, reused after the loop for combining the NSUB subgroup states
  // (m, l [NSUB][GT] and acc [NSUB][GT][HD] floats).
  constexpr int kPipeBytes = Tile::kBytes;
  constexpr int kCombineBytes = NSUB * GT * (HD + 2) * 4;
  constexpr int kSmemBytes = kPipeBytes > kCombineBytes ? kPipeBytes : kCombineBytes;
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
  Word* pipe = reinterpret_cast<Word*>(smem);
  pdl_wait();
  pdl_trigger();

  const int t = blockIdx.x;
  const int h0 = blockIdx.y * heads_per_cta;
  const int kvh = h0 / group;
  const int split = blockIdx.z;
  const int sub = threadIdx.x / LANES, sl = threadIdx.x % LANES;
  const CtaSlice cs = cta_slice(p, t, split);
  const int used = cs.used, s0 = cs.s0, s1 = cs.s1;  // this CTA's slice of cached positions [s0, s1)
  if (split >= used) return;                         // uniform across the CTA

  // fp8: K = stored * k_scale (folded into q), V = stored * v_scale (applied to the CTA's output).
  float qscale = p.scale * kLog2e, vscale = 1.f;
  if constexpr (kFp8) {
    qscale *= p.cache.k_scale[kvh];
    vscale = p.cache.v_scale[kvh];
  }
  float q[GT][8], acc[GT][8], m[NH], l[NH];  // m, l: online-softmax state of this lane's heads
#pragma unroll
  for (int j = 0; j < NH; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
  }
#pragma unroll
  for (int g = 0; g < GT; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
    if (g < heads_per_cta) {
      unpack8(load8(p.q + (static_cast<int64_t>(t) * p.n_head + h0 + g) * HD + sl * 8), q[g]);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] *= qscale;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = 0.f;
    }
  }

  const int owner0 = (threadIdx.x % 32) & ~(LANES - 1);  // this subgroup's first lane in the warp
  const int bs = p.cache.block_size;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * HD + sl * 8;

  // Token u of tile i for this subgroup: s0 + i * kTileTokens + u * NSUB + sub (consecutive subgroups read
  // consecutive cached rows: coalesced). Each thread copies its own 8 elements of K and V into its own shared
  // slots [stage][u][K|V][w][thread] and later reads only those, so no barrier is needed inside the loop.
  auto slot = [&](int stage, int u, int kv, int w) -> Word* {
    return pipe + (((stage * U + u) * 2 + kv) * W + w) * kThreads + threadIdx.x;
  };
  auto issue = [&](int tile, int stage) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = s0 + tile * kTileTokens + u * NSUB + sub;
      const bool ok = j < s1;
      const int64_t off = ok ? static_cast<int64_t>(bt[j / bs]) * p.cache.block_stride + head_off +
                                   static_cast<int64_t>(j % bs) * HD
                             : 0;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        cp_async<sizeof(Word)>(slot(stage, u, 0, w), reinterpret_cast<const Word*>(p.cache.k + off) + w, ok);
        cp_async<sizeof(Word)>(slot(stage, u, 1, w), reinterpret_cast<const Word*>(p.cache.v + off) + w, ok);
      }
    }
  };
  auto read8 = [&](int stage, int u, int kv) {
    Raw8<C> r;
#pragma unroll
    for (int w = 0; w < W; ++w) r.u[w] = *slot(stage, u, kv, w);
    return r;
  };

  // The tile count is uniform across the CTA (shuffles need every lane of a warp).
  const int n_tiles = (s1 - s0 + kTileTokens - 1) / kTileTokens;
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {  // prologue: tiles 0 .. S-2 in flight (one commit group each, maybe empty)
    if (i < n_tiles) issue(i, i);
    cp_async_commit();
  }
  for (int i = 0; i < n_tiles; ++i) {
    const int stage = i % S;
    // Refill the stage consumed in iteration i-1 (this thread's reads of it are done: program order).
    if (i + S - 1 < n_tiles) issue(i + S - 1, (i + S - 1) % S);
    cp_async_commit();
    cp_async_wait<S - 1>();  // groups 0 .. i complete: tile i is in this thread's slots

    // Scores of the tile (log2 domain) of this lane's NH heads, complete after the reduce-scatter.
    float sc[U][NH];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = s0 + i * kTileTokens + u * NSUB + sub < s1;
      float kf[8], d[GT];
      unpack8(read8(stage, u, 0), kf);
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        d[g] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d[g] += q[g][e] * kf[e];
      }
      reduce_scatter<GT, LANES>(d, sl);
#pragma unroll
      for (int j = 0; j < NH; ++j) sc[u][j] = valid ? d[j] : -INFINITY;
    }
    // Online softmax of this lane's heads, rescaling once per tile: sc becomes probabilities.
    float corr[NH];
#pragma unroll
    for (int j = 0; j < NH; ++j) {
      float m_new = m[j];
#pragma unroll
      for (int u = 0; u < U; ++u) m_new = fmaxf(m_new, sc[u][j]);
      if (m_new == -INFINITY) {  // nothing valid yet for this head in this subgroup (acc and l are still 0)
        corr[j] = 1.f;
#pragma unroll
        for (int u = 0; u < U; ++u) sc[u][j] = 0.f;
        continue;
      }
      corr[j] = exp2f(m[j] - m_new);  // m[j] = -inf: 0
      l[j] *= corr[j];
      m[j] = m_new;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        sc[u][j] = exp2f(sc[u][j] - m_new);  // invalid rows: exp2(-inf) = 0
        l[j] += sc[u][j];
      }
    }
    // Every lane accumulates all GT heads for its 8 dims: each head's rescale factor and probabilities come from
    // the lane that owns it.
#pragma unroll
    for (int g = 0; g < GT; ++g) {
      const float c = __shfl_sync(0xffffffffu, corr[g % NH], owner0 + (g / NH) * kOwner);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= c;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      unpack8(read8(stage, u, 1), vf);  // zero-filled for invalid rows, whose probability is 0 anyway
#pragma unroll
      for (int g = 0; g < GT; ++g) {
        const float pr = __shfl_sync(0xffffffffu, sc[u][g % NH], owner0 + (g / NH) * kOwner);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] += pr * vf[e];
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every thread is done with the pipeline: its shared memory becomes the combine buffer

  // Combine the NSUB partial states.
  float* sm_m = reinterpret_cast<float*>(smem);    // [NSUB][GT]
  float* sm_l = sm_m + NSUB * GT;                  // [NSUB][GT]
  float* sm_acc = sm_l + NSUB * GT;                // [NSUB][GT][HD]
  if (sl % kOwner == 0)
#pragma unroll
    for (int j = 0; j < NH; ++j) {
      const int g = sl / kOwner * NH + j;
      sm_m[sub * GT + g] = m[j];
      sm_l[sub * GT + g] = l[j];
    }
#pragma unroll
  for (int g = 0; g < GT; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) sm_acc[(sub * GT + g) * HD + sl * 8 + e] = acc[g][e];
  __syncthreads();
  finish_cta<T, C, NSUB, GT, HD>(p, reinterpret_cast<const float*>(smem), heads_per_cta, t, h0, split, used, vscale);
}

// ---- fp8 cache, head_dim 128: tensor cores ------------------------------------------------------------------
// d0, d1 += A . B on m16n8k16 (f16 in, fp32 accumulate) where only rows 0..7 of A are real (a0: row g, k 2c and
// 2c+1; a2: row g, k 2c+8 and 2c+9; rows 8..15 zero): d0, d1 are row g, columns 2c and 2c+1 (g = lane / 4,
// c = lane % 4); b0: k 2c, 2c+1 of column g, b1: k 2c+8, 2c+9.
__device__ __forceinline__ void mma_rows8(float& d0, float& d1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float d2 = 0.f, d3 = 0.f;  // rows 8..15: stay zero, unused
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

constexpr int kMmaHeadDim = 128;                                      // = bytes of one fp8 K or V row
constexpr int kMmaStages = 3;                                         // 2 tiles in flight while one is consumed
constexpr int kMmaWarps = kThreads / 32;
constexpr int kMmaWarpTokens = 16;                                    // one k-step of P.V per warp and tile
constexpr int kMmaTileTokens = kMmaWarps * kMmaWarpTokens;            // 64 per CTA
constexpr int kMmaChunks = kMmaHeadDim / 16;                          // 16-byte chunks per row: 8
constexpr int kMmaWarpChunks = 2 * kMmaWarpTokens * kMmaChunks;       // K and V of a warp's 16 tokens: 256
constexpr int kMmaPipeBytes = kMmaStages * kMmaWarps * kMmaWarpChunks * 16;  // 48 KiB
constexpr int kMmaAccStride = kMmaHeadDim + 1;  // floats per head row of the combine buffer (bank-conflict free)
constexpr int kMmaCombineBytes = kMmaWarps * kMaxHeadsPerCta * (2 + kMmaAccStride) * 4;  // 16.4 KiB
static_assert(kMmaCombineBytes <= kMmaPipeBytes, "the combine buffer reuses the pipeline's shared memory");
constexpr int kMmaQBytes = 32 * 16 * 4;  // q's A fragments, after the pipeline: 2 KiB
constexpr int kMmaSmemBytes = (kMmaPipeBytes > kMmaCombineBytes ? kMmaPipeBytes : kMmaCombineBytes) + kMmaQBytes;

// Warp w of the CTA takes tokens [w * 16, w * 16 + 16) of every 64-token tile and is the only reader and writer
// of its region of each stage (K rows 0..15 then V rows 0..15, 128 bytes each), so the loop synchronizes with
// __syncwarp only. Copies: lane L copies 16-byte chunk L % 8 of the K and of the V row of tokens L / 8 + 4 k
// (k = 0..3): each cp.async.cg instruction moves 4 whole 128-byte rows (every sector fully used), zero-filled past
// s1. Shared layout (16-byte chunks): chunk j of row r of K|V (kv) of warp w in stage s is stored at chunk
// ((s * 4 + w) * 2 + kv) * 128 + r * 8 + (j ^ (r % 8)) (XOR swizzle): the copies' stores (8 lanes, one row, 8
// chunks) and the fragment loads below (8 lanes of a quarter warp read 8 different chunk columns) are free of
// bank conflicts. Lane (g = lane / 4, c = lane % 4):
// S = Q K^T (rows: the CTA's heads, padded to 16; columns: 8 tokens per n-tile, tile n = tokens n * 8 + g for
// this lane's K row): the reduction over head_dim is permuted so that lane c's k slots of k-step s are the dims
// c * 32 + 4 s .. + 3 (one 32-bit word of chunks 2c, 2c + 1 of the K row: e4m3x4_to_f16x2 gives b0, b1), and q
// uses the same permutation. Its accumulator layout (row g, tokens 2c, 2c + 1 of n-tiles 0 and 1) is the A
// layout of P for O = P V (k = the 16 tokens), so P never leaves the registers. For V (B: k = tokens 2c, 2c + 1
// | 2c + 8, 2c + 9 of column g) the output dims are permuted: column n of n-tile j is dim n * 16 + j, so lane g
// reads chunk g (dims g * 16 ..) of its 4 token rows and pairs the rows' bytes with one byte_perm per 4 dims.
// Combine buffer (after the loop): per warp and head a row of kMmaAccStride floats; lane (g, c) stores its 32
// outputs in an order rotated by c (index j ^ 8 (c / 2), column e ^ (c % 2)) so that each store's 32 addresses
// fall in 32 different banks.
// Numerics: E4M3 codes are exact in f16; q * scale * log2(e) is rounded to f16
// (relative 2^-11; clamped to f16's finite range, which only |q| above ~5e5 at scale 1/sqrt(128) reaches);
// products are exact and summed in fp32, the scores scaled by k_scale in fp32; softmax in fp32; P is rounded to
// f16 (relative 2^-11; l sums the fp32 values) and P.V summed in fp32.
template <class T>
__global__ void __launch_bounds__(kThreads, 4) decode_attention_fp8_mma_kernel(DecodeAttnParamsT<T, fp8> p,
                                                                            int heads_per_cta, int group) {
  constexpr int HD = kMmaHeadDim, GT = kMaxHeadsPerCta, NSUB = kMmaWarps, S = kMmaStages;
  extern __shared__ __align__(16) unsigned char smem[];  // kMmaSmemBytes
  pdl_wait();
  pdl_trigger();

  const int t = blockIdx.x;
  const int h0 = blockIdx.y * heads_per_cta;
  const int kvh = h0 / group;
  const int split = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const CtaSlice cs = cta_slice(p, t, split);
  const int used = cs.used, s0 = cs.s0, s1 = cs.s1;
  if (split >= used) return;  // uniform across the CTA
  const float kscale = p.cache.k_scale[kvh], vscale = p.cache.v_scale[kvh];

  // q of head g (zero for padding rows g >= heads_per_cta): k-step s holds dims c * 32 + 4 s, + 1 | + 2, + 3.
  // The same A fragments serve every warp: warp 0 builds them once into shared memory (words 2 s, 2 s + 1 of
  // lane L: uint4 (s / 2) * 32 + L, halves s % 2), read back per tile rather than held across the loop
  // (16 registers fewer: no spills under 4 CTAs per SM).
  uint4* q_frag = reinterpret_cast<uint4*>(smem + kMmaPipeBytes);  // [4][32]
  if (warp == 0) {
    const float qs = p.scale * kLog2e;
    const bool real = g < heads_per_cta;
    const T* qrow = p.q + (static_cast<int64_t>(t) * p.n_head + h0 + (real ? g : 0)) * HD + c * 32;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      float f[8];
      unpack8(load8(qrow + v * 8), f);
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // pair 4 v + i = dims 8 v + 2 i, + 1: k-step 2 v + i / 2, half i % 2
        const float x0 = real ? fminf(fmaxf(f[2 * i] * qs, -65504.f), 65504.f) : 0.f;  // f16's finite range
        const float x1 = real ? fminf(fmaxf(f[2 * i + 1] * qs, -65504.f), 65504.f) : 0.f;
        const __half2 h = __floats2half2_rn(x0, x1);
        w[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
      q_frag[v * 32 + lane] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  __syncthreads();

  const int bs = p.cache.block_size;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks_per_seq;
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * HD;
  // Byte offsets in shared memory (swizzled, see above) of this lane's 16-byte chunks, stage 0; stage s adds
  // s * kStageBytes, a row + 8 adds 1024 (same swizzle), a row + 4 k adds 512 k. With r8 = lane / 8, j = lane % 8:
  // copies: K row r8 + 4 k, chunk j at st_even + 512 k (k even) / st_even ^ 64 + 512 k (k odd: (r8 + 4) % 8 =
  // r8 ^ 4), V at + 2048; fragment loads: K row g (+ 8 n), chunks 2c (k_lo) and 2c + 1 (k_lo ^ 16); V rows 2c
  // (v_lo) and 2c + 1 (v_hi), chunk g (+ 1024 for rows 2c + 8, 2c + 9).
  constexpr int kRowBytes = kMmaChunks * 16, kVBytes = kMmaWarpTokens * kRowBytes;
  constexpr int kStageBytes = kMmaWarps * kMmaWarpChunks * 16;
  const int r8 = lane / 8, jc = lane % 8;
  const uint32_t wbase = warp * kMmaWarpChunks * 16;
  const uint32_t st_even = wbase + r8 * kRowBytes + (jc ^ r8) * 16, st_odd = st_even ^ 64;
  const uint32_t k_lo = wbase + g * kRowBytes + ((2 * c) ^ g) * 16, k_hi = k_lo ^ 16;
  const uint32_t v_lo = wbase + kVBytes + 2 * c * kRowBytes + (g ^ (2 * c)) * 16;
  const uint32_t v_hi = wbase + kVBytes + (2 * c + 1) * kRowBytes + (g ^ (2 * c + 1)) * 16;
  auto at = [&](uint32_t byte_off) -> uint4* { return reinterpret_cast<uint4*>(smem + byte_off); };
  // This lane's copies of tile `tile`: chunk jc of the K and V rows of tokens base + r8 + 4 k. One division per
  // tile: the block of a row is found by stepping from that of the first one (4 / block_size steps at most per
  // row); block table entries are read only for rows in the slice.
  auto issue = [&](int tile, int stage) {
    const int first = s0 + tile * kMmaTileTokens + warp * kMmaWarpTokens + r8;
    int blk = first / bs, r = first - blk * bs;
    int64_t off[4];
    bool ok[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      ok[k] = first + 4 * k < s1;
      off[k] = ok[k] ? static_cast<int64_t>(bt[blk]) * p.cache.block_stride + head_off +
                           static_cast<int64_t>(r) * HD + jc * 16
                     : 0;
      r += 4;
      while (r >= bs) {
        r -= bs;
        ++blk;
      }
    }
    const uint32_t so = stage * kStageBytes;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t d = so + (k % 2 ? st_odd : st_even) + 4 * kRowBytes * k;
      cp_async<16>(at(d), p.cache.k + off[k], ok[k]);
      cp_async<16>(at(d + kVBytes), p.cache.v + off[k], ok[k]);
    }
  };

  float o[HD / 8][2];  // n-tile j: head g, dims (2c) * 16 + j and (2c + 1) * 16 + j (unnormalized)
#pragma unroll
  for (int j = 0; j < HD / 8; ++j) o[j][0] = o[j][1] = 0.f;
  float m = -INFINITY, l = 0.f;  // head g: running max (log2 domain); l: this lane's share of the sum

  const int n_tiles = (s1 - s0 + kMmaTileTokens - 1) / kMmaTileTokens;
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
    const uint32_t so = stage * kStageBytes;  // tile i's stage
    stage = stage == S - 1 ? 0 : stage + 1;
    const int base = s0 + i * kMmaTileTokens + warp * kMmaWarpTokens;
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
      const uint4 k0 = *at(so + k_lo + 8 * kRowBytes * n), k1 = *at(so + k_hi + 8 * kRowBytes * n);
      const uint32_t kw[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
      sc[n][0] = sc[n][1] = 0.f;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        uint32_t b0, b1;
        e4m3x4_to_f16x2(kw[s], b0, b1);
        mma_rows8(sc[n][0], sc[n][1], qa[s][0], qa[s][1], b0, b1);
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[n][e] = base + n * 8 + 2 * c + e < s1 ? sc[n][e] * kscale : -INFINITY;
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
    const __half2 p0 = __floats2half2_rn(pr[0][0], pr[0][1]), p1 = __floats2half2_rn(pr[1][0], pr[1][1]);
    const uint32_t pa0 = *reinterpret_cast<const uint32_t*>(&p0), pa2 = *reinterpret_cast<const uint32_t*>(&p1);

    // O += P V: rows (2c, 2c + 1) and (2c + 8, 2c + 9), bytes 4 w .. 4 w + 3 of chunk g of each -> n-tiles
    // 4 w .. 4 w + 3.
    const uint4 va = *at(so + v_lo), vb = *at(so + v_hi);
    const uint4 vc = *at(so + v_lo + 8 * kRowBytes), vd = *at(so + v_hi + 8 * kRowBytes);
    const uint32_t ra[4] = {va.x, va.y, va.z, va.w}, rb[4] = {vb.x, vb.y, vb.z, vb.w};
    const uint32_t rc[4] = {vc.x, vc.y, vc.z, vc.w}, rd[4] = {vd.x, vd.y, vd.z, vd.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      uint32_t b0[4], b1[4];
      e4m3x4_to_f16x2(__byte_perm(ra[w], rb[w], 0x5140), b0[0], b0[1]);  // bytes a0 b0 a1 b1
      e4m3x4_to_f16x2(__byte_perm(ra[w], rb[w], 0x7362), b0[2], b0[3]);  // bytes a2 b2 a3 b3
      e4m3x4_to_f16x2(__byte_perm(rc[w], rd[w], 0x5140), b1[0], b1[1]);
      e4m3x4_to_f16x2(__byte_perm(rc[w], rd[w], 0x7362), b1[2], b1[3]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        o[4 * w + q][0] *= corr;
        o[4 * w + q][1] *= corr;
        mma_rows8(o[4 * w + q][0], o[4 * w + q][1], pa0, pa2, b0[q], b1[q]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the combine buffer

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* sm_m = reinterpret_cast<float*>(smem);  // [NSUB][GT]
  float* sm_l = sm_m + NSUB * GT;                // [NSUB][GT]
  float* sm_acc = sm_l + NSUB * GT;              // [NSUB][GT][kMmaAccStride]
  if (g < heads_per_cta) {
    if (c == 0) {
      sm_m[warp * GT + g] = m;
      sm_l[warp * GT + g] = l;
    }
    // Store (j, e) of lane c writes o[jj][ee], jj = j ^ 8 (c / 2), ee = e ^ (c % 2): its bank is (8 warp + g +
    // 16 ee + jj) % 32, and the four c of one g take jj + 16 ee + {0, 8, 16, 24} (mod 32).
    const bool hi = c >= 2, odd = c % 2 != 0;
    float* row = sm_acc + (warp * GT + g) * kMmaAccStride;
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
  finish_cta<T, fp8, NSUB, GT, HD, kMmaAccStride>(p, sm_m, heads_per_cta, t, h0, split, used, vscale);
}

// Dynamic shared memory above 48 KiB needs the opt-in, set once per process (one GPU per process), with the
// largest shared-memory carveout so that 4 CTAs (4 x ~53 KiB) fit an SM.
template <class T>
cudaError_t launch_fp8_mma(const DecodeAttnParamsT<T, fp8>& p, int hpc, int group, dim3 grid, cudaStream_t stream) {
  static const cudaError_t opt_in = [] {
    const cudaError_t e = cudaFuncSetAttribute(decode_attention_fp8_mma_kernel<T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaSmemBytes);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(decode_attention_fp8_mma_kernel<T>,
                                cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }();
  if (opt_in != cudaSuccess) return opt_in;
  return launch_pdl(decode_attention_fp8_mma_kernel<T>, grid, dim3(kThreads), kMmaSmemBytes, stream, p, hpc, group);
}

template <class T, class C, int HD>
cudaError_t dispatch_heads(const DecodeAttnParamsT<T, C>& p, int hpc, int group, dim3 grid, cudaStream_t stream) {
  const dim3 block(kThreads);
  if constexpr (std::is_same_v<C, fp8> && HD == kMmaHeadDim) {
    // Tensor cores need 16-byte aligned rows: true for the engine's caches (256-byte aligned, head_dim 128).
    const bool aligned = (reinterpret_cast<uintptr_t>(p.cache.k) | reinterpret_cast<uintptr_t>(p.cache.v) |
                          static_cast<uintptr_t>(p.cache.block_stride)) % 16 == 0;
    if (aligned && !(p.small_smem && hpc <= 2))
      return launch_fp8_mma(p, hpc, group, grid, stream);
  }
  if (p.small_smem && hpc <= 2) {
    if (hpc <= 1)
      return launch_pdl_decode(decode_attention_kernel<T, C, HD, 1, true>, grid, block, 0, stream, p, hpc, group);
    return launch_pdl_decode(decode_attention_kernel<T, C, HD, 2, true>, grid, block, 0, stream, p, hpc, group);
  }
  if (hpc <= 1)
    return launch_pdl(decode_attention_kernel<T, C, HD, 1, false>, grid, block, 0, stream, p, hpc, group);
  if (hpc <= 2)
    return launch_pdl(decode_attention_kernel<T, C, HD, 2, false>, grid, block, 0, stream, p, hpc, group);
  if (hpc <= 4)
    return launch_pdl(decode_attention_kernel<T, C, HD, 4, false>, grid, block, 0, stream, p, hpc, group);
  return launch_pdl(decode_attention_kernel<T, C, HD, 8, false>, grid, block, 0, stream, p, hpc, group);
}

}  // namespace

// Fewer heads per CTA shorten each CTA's serial work (what bounds a batch of one token) at the cost of reading
// each K/V row once per CTA of the group (through L2).
int decode_heads_per_cta(int group, int max_heads_per_cta) {
  const int cap = max_heads_per_cta > 0 && max_heads_per_cta < kMaxHeadsPerCta ? max_heads_per_cta : kMaxHeadsPerCta;
  int hpc = group;
  while (hpc > cap || group % hpc != 0) --hpc;
  return hpc;
}

bool decode_attention_supported(int head_dim) {
  return head_dim == 8 || head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

int choose_decode_splits(int n_ctas_without_split, int max_ctx, int n_sms, int min_slice) {
  if (n_ctas_without_split <= 0) return 1;
  const int want = (2 * n_sms + n_ctas_without_split - 1) / n_ctas_without_split;  // ~2 waves
  const int by_len = (max_ctx + min_slice - 1) / min_slice;
  int s = want < by_len ? want : by_len;
  if (s > kDecodeMaxSplits) s = kDecodeMaxSplits;
  return s < 1 ? 1 : s;
}

template <class T, class C>
cudaError_t launch_attention_decode(const DecodeAttnParamsT<T, C>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  const int hd = p.cache.head_dim;
  if (!decode_attention_supported(hd) || p.cache.n_head_kv <= 0 || p.n_head % p.cache.n_head_kv != 0 ||
      p.n_splits < 1 || p.n_splits > kDecodeMaxSplits || p.min_slice < 1 ||
      (p.n_splits > 1 && (p.workspace == nullptr || p.counters == nullptr)) ||
      (std::is_same_v<C, fp8> && (p.cache.k_scale == nullptr || p.cache.v_scale == nullptr)))
    return cudaErrorInvalidValue;
  const int group = p.n_head / p.cache.n_head_kv;
  const int hpc = decode_heads_per_cta(group, p.max_heads_per_cta);
  const dim3 grid(p.n_tokens, p.n_head / hpc, p.n_splits);
  cudaError_t err;
  switch (hd) {
    case 8: err = dispatch_heads<T, C, 8>(p, hpc, group, grid, stream); break;
    case 16: err = dispatch_heads<T, C, 16>(p, hpc, group, grid, stream); break;
    case 32: err = dispatch_heads<T, C, 32>(p, hpc, group, grid, stream); break;
    case 64: err = dispatch_heads<T, C, 64>(p, hpc, group, grid, stream); break;
    case 128: err = dispatch_heads<T, C, 128>(p, hpc, group, grid, stream); break;
    default: err = dispatch_heads<T, C, 256>(p, hpc, group, grid, stream); break;  // LANES = 32: a warp per token
  }
  return err;
}

template cudaError_t launch_attention_decode<bf16, bf16>(const DecodeAttnParamsT<bf16, bf16>&, cudaStream_t);
template cudaError_t launch_attention_decode<float, float>(const DecodeAttnParamsT<float, float>&, cudaStream_t);
template cudaError_t launch_attention_decode<bf16, fp8>(const DecodeAttnParamsT<bf16, fp8>&, cudaStream_t);

}  // namespace mopt::cuda
