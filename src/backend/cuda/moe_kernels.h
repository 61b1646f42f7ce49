// Mixture-of-experts kernels of the CUDA backend (docs/moe.md "The forward pass", docs/cuda.md). Same conventions as
// kernels.h: raw device pointers plus a parameter struct with the shapes, enqueue only, no allocation, no host
// synchronization: a whole MoE layer can be captured into a CUDA graph. The routing decision stays on the device:
//
//   router logits [T, ld] fp32  (a GEMM of the normed input with the router matrix, Gemm::run)
//     -> launch_moe_route: pick [T, k] expert ids, pick_w [T, k] weights (and the shared expert's gate [T])
//     -> launch_moe_align: the T*k (token, rank) pairs bucketed by expert into blocks of kMoeBlockRows pairs of
//        one expert each (block_expert [n_blocks], block_pairs [n_blocks, kMoeBlockRows], -1 = no pair)
//     -> launch_moe_gemm (gate|up, SwiGLU epilogue): act [T*k, ff] = swiglu(x[token] . W_gu[e]^T)  per pair
//        p = t*k + j, e = pick[p]
//     -> launch_moe_gemm (down): y [T*k, d] = act[p] . W_down[e]^T
//     -> launch_moe_combine: out [T, d] = sum_j pick_w[t, j] y[t*k + j]  (+ sigmoid gate * shared expert output)
//
// The grid of launch_moe_gemm covers moe_max_blocks(T*k, E) blocks, a bound known on the host from T alone; blocks
// beyond the ones the routing used exit at once. So one launch serves any routing (decode inside CUDA graphs,
// prefill and batches alike), and every expert's weights are read once per block of up to kMoeBlockRows pairs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace mopt::cuda {

// Pairs of one expert one launch_moe_gemm CTA multiplies with each weight row it reads.
constexpr int kMoeBlockRows = 8;
// Largest expert count the routing kernels take (shared memory per token / per layer).
constexpr int kMoeMaxExperts = 1024;
// Tokens from which a step outside CUDA graphs (prefill) runs its experts as per-expert tensor-core GEMMs
// (CudaRunner::enqueue_moe_grouped: one host synchronization per layer for the expert row counts).
constexpr int kMoeGroupedMinTokens = 256;

// Upper bound on the blocks of n_pairs pairs over n_expert experts:
// sum_e ceil(c_e / R) <= n_pairs / R + min(E, n_pairs).
inline int moe_max_blocks(int n_pairs, int n_expert) {
  return (n_pairs + kMoeBlockRows - 1) / kMoeBlockRows + (n_expert < n_pairs ? n_expert : n_pairs);
}

// Router: per token t, probs = softmax(logits[t, 0 .. n_expert)); the k largest (ties: lower id, as the CPU's
// moe_route), weights divided by their sum when norm_topk, then multiplied by scale (DeepSeek's
// routed_scaling_factor). With n_group > 0 (DeepSeek's group_limited_greedy) the experts are n_group equal runs of
// ids and only the topk_group groups with the largest best probability (ties: lower group) are eligible. With
// shared_gate: shared_gate[t] = sigmoid(logits[t, n_expert]) (the shared expert's gate row sits after the experts'
// rows in the router matrix).
struct MoeRouteParams {
  const float* logits = nullptr;  // [n_tokens, ld] fp32, ld >= n_expert (+ 1 with shared_gate)
  int32_t* pick = nullptr;        // [n_tokens, k] expert ids, best first
  float* pick_w = nullptr;        // [n_tokens, k]
  float* shared_gate = nullptr;   // [n_tokens] or null (no shared expert, or an ungated one)
  int n_tokens = 0, ld = 0, n_expert = 0, k = 0;
  bool norm_topk = false;
  float scale = 1.f;
  int n_group = 0, topk_group = 0;  // n_group <= kMoeMaxGroups dividing n_expert, k <= topk_group * n_expert / n_group
};
// Largest n_group launch_moe_route takes (a 64-bit mask of the kept groups, as cpu::moe_route).
constexpr int kMoeMaxGroups = 64;
// Whether p's routing is one the kernels take (n_tokens aside).
bool moe_route_valid(const MoeRouteParams& p);
cudaError_t launch_moe_route(const MoeRouteParams& p, cudaStream_t stream);

// Bucketing of the n_pairs = n_tokens * k pairs by expert (one CTA): expert e's pairs fill ceil(c_e / R) blocks,
// experts in id order; block_expert[b] = its expert, -1 for b >= the blocks used; block_pairs[b, i] = pair index
// (t * k + j) or -1. The order of the pairs inside an expert's blocks is not fixed (atomics); no result depends on it.
struct MoeAlignParams {
  const int32_t* pick = nullptr;  // [n_pairs]
  int32_t* block_expert = nullptr;  // [max_blocks]
  int32_t* block_pairs = nullptr;   // [max_blocks, kMoeBlockRows]
  int n_pairs = 0, n_expert = 0, max_blocks = 0;  // max_blocks = moe_max_blocks(n_pairs, n_expert)
  // Optional (all three or none), for the grouped path: the pairs packed by expert without padding.
  int32_t* expert_start = nullptr;  // [n_expert + 1] first packed row of each expert (exclusive prefix of counts)
  int32_t* pair_row = nullptr;      // [n_pairs] packed row of each pair
  int32_t* packed_pair = nullptr;   // [n_pairs] pair of each packed row
};
cudaError_t launch_moe_align(const MoeAlignParams& p, cudaStream_t stream);

// launch_moe_route then launch_moe_align (ap.pick == rp.pick, ap.n_pairs == rp.n_tokens * rp.k), in one launch
// for small batches (up to 64 tokens: decode steps; up to 32 routing warps, fewer for many experts), else two.
cudaError_t launch_moe_route_align(const MoeRouteParams& rp, const MoeAlignParams& ap, cudaStream_t stream);

// One token's routing in one launch (single-stream decode on the fused bf16 path, in place of launch_rmsnorm, the
// router GEMM and launch_moe_route_align):
//   normed = bf16(residual * rstd * norm_w), rstd = 1 / sqrt(mean(residual^2) + eps)   (launch_rmsnorm's output)
//   logits[r] = sum_i normed[i] router[r, i]   (fp32, r < n_rows)
//   then, by the last CTA to finish (a ticket), launch_moe_route's picks, weights and shared gate of the token, and
//   the blocks launch_moe_gemm reads with one_pair_per_block: block b < k holds pair b (rank b's expert), blocks
//   k .. max_blocks - 1 none. (launch_moe_align would order the blocks by expert id; no result depends on the order.)
// n_rows = route.ld router rows are computed (zero rows included), route.logits == logits, route.n_tokens == 1.
struct MoeRouterDecodeParams {
  const float* residual = nullptr;  // [d] fp32 residual stream of the token
  const bf16* norm_w = nullptr;     // [d] RMSNorm weight
  float eps = 1e-6f;
  bf16* normed = nullptr;           // [d] the experts' input
  const bf16* router = nullptr;     // [n_rows, d] router matrix
  float* logits = nullptr;          // [n_rows] fp32
  int d = 0, n_rows = 0;            // d a multiple of 8
  MoeRouteParams route;             // the routing of the token (pick [k], pick_w [k], shared_gate [1] or null)
  int32_t* block_expert = nullptr;  // [max_blocks]
  int32_t* block_pairs = nullptr;   // [max_blocks, kMoeBlockRows]
  int max_blocks = 0;               // >= moe_max_blocks(k, n_expert)
  int32_t* ticket = nullptr;        // [1] zero before the launch, left zero
};
cudaError_t launch_moe_router_decode(const MoeRouterDecodeParams& p, cudaStream_t stream);

// Gathered expert GEMM, T = bf16 or float (fp32 accumulation), for every pair p in block b (expert e =
// block_expert[b]) with input row xrow(p) = x[p / x_div, 0 .. k):
//   swiglu_out false (down, x_div = 1):       y[p, n] = sum_k xrow(p)[k] w[e, n, k]             n < n_out
//   swiglu_out true (gate|up, x_div = k_used): y[p, j] = silu(g) * u, g = xrow(p) . w[e, j], u = xrow(p) . w[e,
//                                              n_out + j] (w holds each expert's n_out gate rows, then its up rows)
// k a multiple of 8 (16-byte weight rows in bf16).
template <class T>
struct MoeGemmParamsT {
  const T* x = nullptr;               // [rows, k]
  const T* w = nullptr;               // [n_expert, n_out (x2 with swiglu_out), k]
  T* y = nullptr;                     // [n_pairs, n_out]
  const int32_t* block_expert = nullptr;  // [max_blocks]
  const int32_t* block_pairs = nullptr;   // [max_blocks, kMoeBlockRows]
  int max_blocks = 0, n_out = 0, k = 0, x_div = 1;
  bool swiglu_out = false;
  bool one_pair_per_block = false;  // true only when no block holds two pairs (one token: its experts differ)
  // Combine fused into the down GEMM of one token without a shared expert (residual set; needs one_pair_per_block,
  // not swiglu_out, n_pairs <= 32): residual[n] += sum_{j < n_pairs} pick_w[j] y[j, n] in rank order
  // (launch_moe_combine's sums, bit for bit; y is written too), each CTA taking every pick of its columns. Saves
  // the combine's launch per layer in single-stream decode.
  float* residual = nullptr;          // [n_out] fp32 residual stream, or null (no fused combine)
  const float* pick_w = nullptr;      // [n_pairs]
  int n_pairs = 0;
};
template <class T>
cudaError_t launch_moe_gemm(const MoeGemmParamsT<T>& p, cudaStream_t stream);

// m[t, :] = sum_{j < k} pick_w[t, j] * y[t * k + j, :]  (rank order, fp32)  + g[t] * shared[t, :] (shared set;
// g = shared_gate, or 1 without it: DeepSeek's ungated shared experts); then out[t, :] = m (general path), or
// residual[t, :] += m (fused decode path: out null). shared may be out (each element read, then written, by the
// same thread).
template <class T>
struct MoeCombineParamsT {
  const T* y = nullptr;               // [n_tokens * k, n_embd]
  const int32_t* y_row = nullptr;     // [n_tokens * k] row of y of each pair (grouped path), or null (the pair)
  const float* pick_w = nullptr;      // [n_tokens, k]
  const float* shared_gate = nullptr; // [n_tokens] or null (ungated, or no shared expert)
  const T* shared = nullptr;          // [n_tokens, n_embd] the shared expert's output, or null (none)
  T* out = nullptr;                   // [n_tokens, n_embd], or null
  float* residual = nullptr;          // [n_tokens, n_embd] fp32 residual stream (when out is null)
  int n_tokens = 0, k = 0, n_embd = 0;
};
template <class T>
cudaError_t launch_moe_combine(const MoeCombineParamsT<T>& p, cudaStream_t stream);

// Grouped path: out[r, :] = x[packed_pair[r] / x_div, :] for r < n_rows (the pairs' input rows packed by expert).
template <class T>
cudaError_t launch_moe_gather(const T* x, const int32_t* packed_pair, int x_div, int n_rows, int n, T* out,
                              cudaStream_t stream);

}  // namespace mopt::cuda
