// The routing kernels of a mixture-of-experts layer (moe_kernels.h): softmax / top-k / renormalization per token,
// and the bucketing of the (token, rank) pairs by expert that launch_moe_gemm's blocks read. Both stay on the
// device, so a decode step with its routing can be replayed from a CUDA graph. A single token's routing (single-stream
// decode) is one launch with the RMSNorm before it and the router product: launch_moe_router_decode.
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/storage.cuh"
#include "backend/cuda/warp_reduce.cuh"

namespace mopt::cuda {
namespace {

constexpr int kRouteWarps = 4;  // tokens per CTA of moe_route_kernel

// The topk_group groups (of n_group equal runs of expert ids) with the largest best probability in pr [n_expert],
// ties to the lower group (as cpu::moe_route), as a mask (bit g: group g kept), on every lane of the warp. Keys as
// in route_token: a probability's bits + 1 (probabilities are >= 0; NaN and taken groups 0).
__device__ uint64_t kept_groups(const MoeRouteParams& p, const float* pr, int lane) {
  const int per_group = p.n_expert / p.n_group;
  unsigned key[kMoeMaxGroups / 32];  // this lane's groups lane and lane + 32
#pragma unroll
  for (int i = 0; i < kMoeMaxGroups / 32; ++i) {
    const int g = lane + 32 * i;
    float best = -1.f;
    if (g < p.n_group)
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) best = fmaxf(best, pr[e]);
    key[i] = best >= 0.f ? __float_as_uint(best) + 1u : 0u;
  }
  uint64_t kept = 0;
  for (int j = 0; j < p.topk_group; ++j) {
    unsigned bk = 0;
    int bg = INT_MAX;
#pragma unroll
    for (int i = 0; i < kMoeMaxGroups / 32; ++i)
      if (key[i] > bk) {  // ascending groups within a lane: a tie keeps the lower one
        bk = key[i];
        bg = lane + 32 * i;
      }
    const unsigned top = __reduce_max_sync(0xffffffffu, bk);
    bg = __reduce_min_sync(0xffffffffu, bk == top ? bg : INT_MAX);
    if (bg >= p.n_group) break;  // no candidate left (NaN probabilities)
    kept |= uint64_t{1} << bg;
#pragma unroll
    for (int i = 0; i < kMoeMaxGroups / 32; ++i)
      if (lane + 32 * i == bg) key[i] = 0u;
  }
  return kept;
}

// Token t's routing by one warp (lane = its lane), its probabilities in pr [n_expert] (shared memory). Returns
// the expert of rank `lane` (lanes >= k: -1). The logits are read through L2 (ld.global.cg): in
// moe_router_decode_kernel other CTAs of the same launch wrote them.
__device__ int route_token(const MoeRouteParams& p, int t, int lane, float* pr) {
  const int E = p.n_expert;
  const float* l = p.logits + static_cast<int64_t>(t) * p.ld;
  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) {
    const float v = __ldcg(l + e);
    pr[e] = v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int e = lane; e < E; e += 32) {
    const float v = expf(pr[e] - mx);
    pr[e] = v;
    sum += v;
  }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
  for (int e = lane; e < E; e += 32) pr[e] *= inv;
  __syncwarp();
  if (p.n_group > 0) {  // group_limited_greedy: the experts of groups not kept become ineligible (-1, as taken)
    const uint64_t kept = kept_groups(p, pr, lane);
    const int per_group = E / p.n_group;
    for (int e = lane; e < E; e += 32)
      if (!(kept >> (e / per_group) & 1)) pr[e] = -1.f;
    __syncwarp();
  }
  // k rounds: the largest remaining probability, ties to the lower id (as cpu::moe_route); taken ones set to -1.
  float wsum = 0.f, mine = 0.f;  // lane j keeps pick j's weight and expert
  int mine_e = -1;
  // A candidate's key: its probability's bits + 1 (non-negative floats order as their bits), 0 for taken ones and
  // NaN; the largest key over the warp, then the lowest id holding it, in two warp reductions (redux.sync).
  for (int j = 0; j < p.k; ++j) {
    unsigned bk = 0;
    int bi = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float v = pr[e];
      const unsigned key = v >= 0.f ? __float_as_uint(fabsf(v)) + 1u : 0u;
      if (key > bk) {  // ascending e within a lane: a tie keeps the lower id
        bk = key;
        bi = e;
      }
    }
    const unsigned top = __reduce_max_sync(0xffffffffu, bk);
    bi = __reduce_min_sync(0xffffffffu, bk == top ? bi : INT_MAX);
    float bv = __uint_as_float(top - 1u);
    if (bi >= E) {  // NaN logits: no candidate (top 0, every bi INT_MAX); keep the output well-formed
      bi = j % E;
      bv = 0.f;
    }
    wsum += bv;
    if (lane == j) {
      mine = bv;
      mine_e = bi;
    }
    if (lane == 0) p.pick[static_cast<int64_t>(t) * p.k + j] = bi;
    __syncwarp();
    if (lane == bi % 32) pr[bi] = -1.f;
    __syncwarp();
  }
  if (lane < p.k) p.pick_w[static_cast<int64_t>(t) * p.k + lane] = (p.norm_topk ? mine / wsum : mine) * p.scale;
  if (p.shared_gate && lane == 0) p.shared_gate[t] = 1.f / (1.f + expf(-__ldcg(l + E)));
  return mine_e;
}

// One warp per token; probabilities in shared memory [kRouteWarps][n_expert].
__global__ void moe_route_kernel(MoeRouteParams p) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float probs_all[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= p.n_tokens) return;  // whole warps
  route_token(p, t, lane, probs_all + warp * p.n_expert);
}

// Exclusive prefix sum of v over the CTA's kMoeMaxExperts threads in thread order (every thread calls it).
__device__ int block_exclusive_scan(int v) {
  __shared__ int warp_total[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  __syncthreads();  // warp_total's previous use is over
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int t = warp_total[lane];
    int ti = t;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, ti, o);
      if (lane >= o) ti += u;
    }
    warp_total[lane] = ti - t;  // exclusive over warps
  }
  __syncthreads();
  return warp_total[warp] + incl - v;
}

// The bucketing by the whole CTA (kMoeMaxExperts threads): counts per expert, each expert's first block, then
// every pair placed in its expert's blocks.
__device__ void align_pairs(const MoeAlignParams& p) {
  __shared__ int count[kMoeMaxExperts], first[kMoeMaxExperts], cstart[kMoeMaxExperts], fill[kMoeMaxExperts];
  const int E = p.n_expert, R = kMoeBlockRows;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    count[e] = 0;
    fill[e] = 0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x) {
    const int e = p.pick[i];
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  // first[e] = exclusive prefix sum of the experts' block counts; cstart[e] of their pair counts (thread e).
  const int e_me = threadIdx.x;
  const int n_me = e_me < E ? count[e_me] : 0;
  const int first_me = block_exclusive_scan(e_me < E ? (n_me + R - 1) / R : 0);
  const int cstart_me = block_exclusive_scan(n_me);
  if (e_me < E) {
    first[e_me] = first_me;
    cstart[e_me] = cstart_me;
    if (p.expert_start) p.expert_start[e_me] = cstart_me;
  }
  if (p.expert_start && e_me == E - 1) p.expert_start[E] = cstart_me + n_me;
  for (int b = threadIdx.x; b < p.max_blocks; b += blockDim.x) {
    p.block_expert[b] = -1;
#pragma unroll
    for (int i = 0; i < R; ++i) p.block_pairs[static_cast<int64_t>(b) * R + i] = -1;
  }
  __syncthreads();  // also orders the -1 stores before the ones below (same CTA)
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int nb = (count[e] + R - 1) / R;
    for (int b = 0; b < nb; ++b) p.block_expert[first[e] + b] = e;
  }
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x) {
    const int e = p.pick[i];
    if (e < 0 || e >= E) continue;
    const int pos = atomicAdd(&fill[e], 1);
    p.block_pairs[static_cast<int64_t>(first[e]) * R + pos] = i;
    if (p.pair_row) {
      p.pair_row[i] = cstart[e] + pos;
      p.packed_pair[cstart[e] + pos] = i;
    }
  }
}

__global__ void moe_align_kernel(MoeAlignParams p) {
  pdl_wait();
  pdl_trigger();
  align_pairs(p);
}

// Small batches (decode): both in one launch, the first n_route_warps warps routing tokens w, w + n_route_warps,
// ...; probabilities [n_route_warps][n_expert].
__global__ void moe_route_align_kernel(MoeRouteParams rp, MoeAlignParams ap, int n_route_warps) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float probs_all[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < n_route_warps)
    for (int t = warp; t < rp.n_tokens; t += n_route_warps) route_token(rp, t, lane, probs_all + warp * rp.n_expert);
  __syncthreads();  // the picks (global memory) are visible to the whole CTA after this
  align_pairs(ap);
}

// launch_moe_router_decode: one router row per warp, kRdWarps per CTA. Each warp normalizes the whole residual row
// itself (d fp32 values, from L2: no barrier before its dot product), with launch_rmsnorm's formula and bf16
// rounding. The row goes in stages of kRdPre 16-byte chunks per lane (d <= 2048: one stage), each stage's loads
// (router row, norm weights, residual) issued together before its first store (a store in between would order the
// loads after it); the first stage's router and norm weights before the PDL wait (weights are never written). Then
// every CTA takes a ticket; the last one's first warp routes the token.
constexpr int kRdWarps = 4;
constexpr int kRdPre = 8;

// Chunk c of the normed row (residual values v, norm weights gr) rounded to bf16 (returned packed), its product
// with the router chunk wr added to acc.
__device__ __forceinline__ uint4 normed_dot_chunk(const float4& v0, const float4& v1, const uint4& gr, const uint4& wr,
                                                  float rstd, float& acc) {
  const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
  Raw8<bf16> graw, wraw;
  graw.u[0] = gr;
  wraw.u[0] = wr;
  float g[8], wf[8];
  unpack8(graw, g);
  unpack8(wraw, wf);
  uint32_t packed[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * q] * rstd * g[2 * q], v[2 * q + 1] * rstd * g[2 * q + 1]);
    const float2 x = __bfloat1622float2(h);
    acc = fmaf(x.x, wf[2 * q], acc);
    acc = fmaf(x.y, wf[2 * q + 1], acc);
    packed[q] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

__device__ __forceinline__ float sum_sq(const float4& a, const float4& b) {
  return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
}

// One stage: chunks c = c0 + lane + 32 s (s < kRdPre, c < chunks) of the residual into xs, and (with_weights) of
// the router row w and the norm weights nw into ws, gs; past the row zeros.
__device__ __forceinline__ void load_stage(const float4* res, const uint4* w, const uint4* nw, int c0, int chunks,
                                           bool with_weights, float4 (&xs)[kRdPre][2], uint4 (&ws)[kRdPre],
                                           uint4 (&gs)[kRdPre]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int s = 0; s < kRdPre; ++s) {
    const int c = c0 + lane + 32 * s;
    const bool in = c < chunks;
    xs[s][0] = in ? res[2 * c] : make_float4(0.f, 0.f, 0.f, 0.f);
    xs[s][1] = in ? res[2 * c + 1] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (with_weights) {
      ws[s] = in ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
      gs[s] = in ? __ldg(nw + c) : make_uint4(0, 0, 0, 0);
    }
  }
}

__global__ void __launch_bounds__(kRdWarps * 32) moe_router_decode_kernel(MoeRouterDecodeParams p) {
  __shared__ float probs[kMoeMaxExperts];
  __shared__ int last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRdWarps + warp;
  const bool has_row = row < p.n_rows;
  const int chunks = has_row ? p.d / 8 : 0;  // 8 values per 16-byte chunk of a bf16 row
  const uint4* w = reinterpret_cast<const uint4*>(p.router) + static_cast<int64_t>(has_row ? row : 0) * (p.d / 8);
  const uint4* nw = reinterpret_cast<const uint4*>(p.norm_w);
  const float4* res = reinterpret_cast<const float4*>(p.residual);
  uint4 ws[kRdPre], gs[kRdPre];  // the current stage's router row and norm weights
  float4 xs[kRdPre][2];          // and residual
#pragma unroll
  for (int s = 0; s < kRdPre; ++s) {
    const int c = lane + 32 * s;
    const bool in = c < chunks;
    ws[s] = in ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
    gs[s] = in ? __ldg(nw + c) : make_uint4(0, 0, 0, 0);
  }
  pdl_trigger();
  pdl_wait();
  if (has_row) {
    constexpr int kStage = 32 * kRdPre;  // chunks per stage (all lanes)
    float ss = 0.f;
    for (int c0 = kStage; c0 < chunks; c0 += kStage) {  // the later stages' sums of squares (loads only)
      load_stage(res, w, nw, c0, chunks, false, xs, ws, gs);
#pragma unroll
      for (int s = 0; s < kRdPre; ++s) ss += sum_sq(xs[s][0], xs[s][1]);
    }
    load_stage(res, w, nw, 0, chunks, false, xs, ws, gs);  // the first stage's residual, kept for its products
#pragma unroll
    for (int s = 0; s < kRdPre; ++s) ss += sum_sq(xs[s][0], xs[s][1]);  // zeros past the row
    const float rstd = rsqrtf(warp_sum(ss) / static_cast<float>(p.d) + p.eps);
    float acc = 0.f;
    uint4* out = reinterpret_cast<uint4*>(p.normed);  // row 0's warp stores the normed row
    for (int c0 = 0; c0 < chunks; c0 += kStage) {
      if (c0 > 0) load_stage(res, w, nw, c0, chunks, true, xs, ws, gs);
#pragma unroll
      for (int s = 0; s < kRdPre; ++s) {
        const int c = c0 + lane + 32 * s;
        if (c >= chunks) break;
        const uint4 x = normed_dot_chunk(xs[s][0], xs[s][1], gs[s], ws[s], rstd, acc);
        if (row == 0) out[c] = x;
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) p.logits[row] = acc;
  }
  __threadfence();  // this CTA's logits reach L2 before its ticket
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(p.ticket, 1) == static_cast<int>(gridDim.x) - 1;
    if (last) *p.ticket = 0;  // every other CTA has taken its ticket
  }
  __syncthreads();
  if (!last || warp != 0) return;
  __threadfence();
  const int e = route_token(p.route, 0, lane, probs);  // lane j < k: rank j's expert
  for (int b = lane; b < p.max_blocks; b += 32) {      // k <= 32: blocks past the first 32 are unused
    const bool used = b < p.route.k;
    p.block_expert[b] = used ? e : -1;
#pragma unroll
    for (int r = 0; r < kMoeBlockRows; ++r)
      p.block_pairs[static_cast<int64_t>(b) * kMoeBlockRows + r] = used && r == 0 ? b : -1;
  }
}

// Fused for few tokens. The probabilities (dynamic shared memory) sit next to align_pairs' 16 KiB of static
// shared memory, and a launch without an opt-in gets 48 KiB in all (more fails with cudaErrorInvalidValue, as 32
// warps at 256 experts did): the routing warps' probabilities get at most 24 KiB, so fewer warps route for many
// experts.
constexpr int kFusedMaxTokens = 64;
constexpr size_t kFusedSmem = 24u << 10;

}  // namespace

bool moe_route_valid(const MoeRouteParams& p) {
  if (p.n_expert <= 0 || p.n_expert > kMoeMaxExperts || p.k <= 0 || p.k > 32 || p.k > p.n_expert ||
      p.ld < p.n_expert + (p.shared_gate ? 1 : 0))
    return false;
  if (p.n_group == 0) return true;
  return p.n_group > 0 && p.n_group <= kMoeMaxGroups && p.n_expert % p.n_group == 0 && p.topk_group >= 1 &&
         p.topk_group <= p.n_group && p.k <= p.topk_group * (p.n_expert / p.n_group);
}

cudaError_t launch_moe_route_align(const MoeRouteParams& rp, const MoeAlignParams& ap, cudaStream_t stream) {
  const size_t per_warp = sizeof(float) * static_cast<size_t>(rp.n_expert > 0 ? rp.n_expert : 1);
  const int n_route_warps = static_cast<int>(std::min<size_t>({32, static_cast<size_t>(std::max(rp.n_tokens, 1)),
                                                                kFusedSmem / per_warp}));
  const size_t smem = per_warp * static_cast<size_t>(n_route_warps);
  if (rp.n_tokens > kFusedMaxTokens || n_route_warps < 1 || rp.n_tokens <= 0) {
    if (const cudaError_t e = launch_moe_route(rp, stream); e != cudaSuccess) return e;
    return launch_moe_align(ap, stream);
  }
  if (!moe_route_valid(rp) || ap.n_pairs != rp.n_tokens * rp.k ||
      ap.n_expert != rp.n_expert || ap.pick != rp.pick || ap.max_blocks < moe_max_blocks(ap.n_pairs, ap.n_expert))
    return cudaErrorInvalidValue;
  return launch_pdl_decode(moe_route_align_kernel, dim3(1), dim3(kMoeMaxExperts), smem, stream, rp, ap,
                           n_route_warps);
}

cudaError_t launch_moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  if (!moe_route_valid(p)) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * kRouteWarps * static_cast<size_t>(p.n_expert);
  return launch_pdl(moe_route_kernel, dim3((p.n_tokens + kRouteWarps - 1) / kRouteWarps), dim3(kRouteWarps * 32),
                    smem, stream, p);
}

cudaError_t launch_moe_align(const MoeAlignParams& p, cudaStream_t stream) {
  if (p.n_pairs <= 0) return cudaSuccess;
  if (p.n_expert <= 0 || p.n_expert > kMoeMaxExperts || p.max_blocks < moe_max_blocks(p.n_pairs, p.n_expert))
    return cudaErrorInvalidValue;
  return launch_pdl(moe_align_kernel, dim3(1), dim3(kMoeMaxExperts), 0, stream, p);
}

cudaError_t launch_moe_router_decode(const MoeRouterDecodeParams& p, cudaStream_t stream) {
  const MoeRouteParams& r = p.route;
  if (p.d <= 0 || p.d % 8 != 0 || p.n_rows <= 0 || !p.residual || !p.norm_w || !p.normed || !p.router ||
      !p.logits || !p.ticket || !p.block_expert || !p.block_pairs || r.n_tokens != 1 || r.logits != p.logits ||
      r.ld != p.n_rows || !moe_route_valid(r) || p.max_blocks < moe_max_blocks(r.k, r.n_expert))
    return cudaErrorInvalidValue;
  return launch_pdl_decode(moe_router_decode_kernel, dim3((p.n_rows + kRdWarps - 1) / kRdWarps),
                           dim3(kRdWarps * 32), 0, stream, p);
}

}  // namespace mopt::cuda
