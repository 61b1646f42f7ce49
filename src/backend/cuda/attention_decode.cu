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
// head_dim 128 with a bf16 or fp8 cache (except the small-smem configuration with <= 2 heads per CTA, which keeps
// the per-lane kernel): the tensor-core kernel of attention_decode_mma.cu, with the same grid, splits, merge
// (finish_cta, attention_decode_common.cuh), scales and PDL.
// Alignment: every 8-element group starts at a multiple of 8 elements from a 256-byte aligned allocation
// (head_dim is a multiple of 8), so the 8-byte (fp8) / 16-byte (bf16) / 32-byte (fp32) copies are aligned.
#include <cfloat>
#include <type_traits>

#include "backend/cuda/attention_decode_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_formats.cuh"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

using decode_attn::cp_async;
using decode_attn::cp_async_commit;
using decode_attn::cp_async_wait;
using decode_attn::cta_work;
using decode_attn::CtaWork;
using decode_attn::finish_cta;
using decode_attn::kLog2e;
using decode_attn::kMaxHeadsPerCta;
using decode_attn::kThreads;

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

  const CtaWork work = cta_work(p, heads_per_cta, group);
  const int t = work.t, h0 = work.h0, kvh = work.kvh, split = work.split;
  const int sub = threadIdx.x / LANES, sl = threadIdx.x % LANES;
  // This CTA's slice of cached positions [s0, s1).
  const int used = work.slice.used, s0 = work.slice.s0, s1 = work.slice.s1;
  if (split >= used) return;  // uniform across the CTA

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

template <class T, class C, int HD>
cudaError_t dispatch_heads(const DecodeAttnParamsT<T, C>& p, int hpc, int group, dim3 grid, cudaStream_t stream) {
  const dim3 block(kThreads);
  if constexpr (HD == 128 && std::is_same_v<T, bf16> && !std::is_same_v<C, float>)
    if (decode_attn::mma_supported(p, hpc)) return decode_attn::launch_mma<C>(p, hpc, group, grid, stream);
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
