// The expert GEMMs of a mixture-of-experts layer and the weighted sum of the experts' outputs (moe_kernels.h).
//
// launch_moe_gemm: grid (max_blocks, column tiles). A CTA takes block b of the bucketed pairs (one expert e, up to
// kMoeBlockRows pairs) and kColsPerCta weight rows of W[e]; each warp streams kColsPerWarp rows (16-byte loads,
// lanes along k, kUnroll steps in flight, bypassing L1) and multiplies each loaded weight vector with every pair
// of the block, whose input rows (a few KiB, shared by the CTA's warps) come through L1. So an expert's weights
// are read once per block, whatever the number of pairs in it, and the kernel needs no shared memory (no staging
// barrier; launched with the decode step's shared-memory configuration, launch_pdl_decode, so an SM need not
// drain to switch configurations between it and its neighbours). Blocks past the ones the routing
// used exit at once. Grid x is the block index, so the CTAs reading the same weight rows for different blocks of
// one expert run close in time (L2 reuse for batches). A GEMV at decode (one pair per expert); for batches a SIMT
// GEMM: prefill is correct but not tensor-core fast (docs/moe.md).
// With swiglu_out (gate|up), a warp's first kColsPerWarp / 2 rows are gate rows j.. and the others the up rows
// n_ff + j.., so the epilogue writes silu(gate) * up: act [n_pairs, n_ff] for the down GEMM.
// One token's down GEMM may also do the combine (MoeGemmParamsT::residual): then a CTA takes all k picks of its
// columns (moe_down_combine_kernel), and sums them in shared memory.
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/storage.cuh"

namespace mopt::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kColsPerWarp = 4;
constexpr int kColsPerCta = kWarps * kColsPerWarp;
// Tilings: R pairs per block handled (kMoeBlockRows, or 1 when every block holds one pair: a single token, whose k
// picks are distinct experts), kUnroll 16-byte steps per weight row in flight (2: 8 loads per lane). R = 1 fits
// in 64 registers: 4 CTAs (32 warps) per SM, so a decode step's expert GEMM (e.g. Qwen3-30B-A3B gate|up: 8
// experts x 48 CTAs) is resident in one wave instead of 1.5 at 2 CTAs per SM, with as many bytes in flight.

// Weights are streamed once: bf16 rows bypass L1 (as the skinny GEMM's loads); fp32 (tests) plain loads.
__device__ __forceinline__ Raw8<bf16> load_weights(const bf16* p) {
  Raw8<bf16> r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.u[0].x), "=r"(r.u[0].y), "=r"(r.u[0].z), "=r"(r.u[0].w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ Raw8<float> load_weights(const float* p) { return load8(p); }

// Activations: read-only for the kernel and shared by its warps (L1).
template <class T>
__device__ __forceinline__ Raw8<T> load_act(const T* p) {
  Raw8<T> r;
  const uint4* s = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) r.u[i] = __ldg(s + i);
  return r;
}

// acc[r][c] = p.x[xoff[r] .. + K) . wbase[row[c] * K ..] (K = p.k) for the first nv of R input rows (row[c] -1:
// 0), summed over the warp (every lane gets the totals): each lane takes 8 values per 256, kUnroll steps of
// kColsPerWarp 16-byte weight loads in flight. (p.x and p.k are read from the kernel's parameters, not held in
// registers: the R = 1 tilings live within 64 registers.)
template <class T, int R, int kUnroll>
__device__ __forceinline__ void warp_dot_rows(const MoeGemmParamsT<T>& p, const int (&xoff)[R], int nv, const T* wbase,
                                              const int (&row)[kColsPerWarp], float (&acc)[R][kColsPerWarp]) {
  const int lane = threadIdx.x % 32, K = p.k;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) acc[r][c] = 0.f;

  for (int i0 = lane * 8; i0 < K; i0 += kUnroll * 256) {
    Raw8<T> raw[kUnroll][kColsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) {
        const int i = i0 + u * 256;
        raw[u][c] = i < K && row[c] >= 0 ? load_weights(wbase + static_cast<int64_t>(row[c]) * K + i) : zero8<T>();
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * 256;
      if (i >= K) break;
      float wf[kColsPerWarp][8];
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) unpack8(raw[u][c], wf[c]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= nv) break;
        float xf[8];
        unpack8(load_act(p.x + xoff[r] + i), xf);
#pragma unroll
        for (int c = 0; c < kColsPerWarp; ++c) {
          float a = acc[r][c];
#pragma unroll
          for (int q = 0; q < 8; ++q) a = fmaf(wf[c][q], xf[q], a);
          acc[r][c] = a;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= nv) break;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      float v = acc[r][c];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[r][c] = v;
    }
  }
}

// Block b's pairs (expert e) times this CTA's weight rows.
template <class T, bool kSwiGluOut, int R, int kUnroll>
__device__ __forceinline__ void moe_gemm_block(const MoeGemmParamsT<T>& p, int b, int e) {
  constexpr int kBlock = kMoeBlockRows;  // stride of block_pairs
  const int K = p.k;
  int xoff[R];  // element offset of each pair's input row (valid pairs come first in a block)
  int nv = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int pr = p.block_pairs[static_cast<int64_t>(b) * kBlock + r];
    nv += pr >= 0;
    xoff[r] = pr >= 0 ? pr / p.x_div * K : 0;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's weight rows (-1: past the matrix).
  int row[kColsPerWarp];
  constexpr int kHalf = kColsPerWarp / 2;
  const int j0 = (blockIdx.y * kWarps + warp) * (kSwiGluOut ? kHalf : kColsPerWarp);
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    if (kSwiGluOut) {
      const int j = j0 + c % kHalf;
      row[c] = j < p.n_out ? (c < kHalf ? j : p.n_out + j) : -1;
    } else {
      row[c] = j0 + c < p.n_out ? j0 + c : -1;
    }
  }
  const int w_rows = kSwiGluOut ? 2 * p.n_out : p.n_out;
  float acc[R][kColsPerWarp];
  warp_dot_rows<T, R, kUnroll>(p, xoff, nv, p.w + static_cast<int64_t>(e) * w_rows * K, row, acc);
  int pairs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) pairs[r] = p.block_pairs[static_cast<int64_t>(b) * kBlock + r];
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= nv) break;
    T* y = p.y + static_cast<int64_t>(pairs[r]) * p.n_out;
    if (kSwiGluOut) {
#pragma unroll
      for (int c = 0; c < kHalf; ++c) {
        if (row[c] < 0) continue;
        const float g = acc[r][c], u = acc[r][c + kHalf];
        // bf16 keeps the fast exp (its output rounding dominates); fp32 the accurate one (as launch_swiglu).
        const float ex = sizeof(T) == 2 ? __expf(-g) : expf(-g);
        y[row[c]] = from_f32<T>(g / (1.f + ex) * u);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c)
        if (row[c] >= 0) y[row[c]] = from_f32<T>(acc[r][c]);
    }
  }
}

template <class T, bool kSwiGluOut, int R, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32, R == 1 ? 4 : 2) moe_gemm_kernel(MoeGemmParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int b = blockIdx.x;
  const int e = p.block_expert[b];
  if (e >= 0) moe_gemm_block<T, kSwiGluOut, R, kUnroll>(p, b, e);
}

// One token's down GEMM with the combine (MoeGemmParamsT::residual). A CTA takes every pick for its columns, so
// the k expert outputs of a column meet in one CTA (shared memory) and are summed there in rank order: no ticket
// between CTAs, no second pass through L2. Warp w computes the blocks w % slots, w % slots + slots, ... (one pick
// each) for column group w / slots of kColsPerWarp columns; slots = the smallest power of two >= min(n_pairs,
// kWarps), so a CTA has kWarps / slots column groups (Qwen3-30B-A3B, top-8: 4 columns, a warp per pick; Mixtral,
// top-2: 16 columns, 4 warps per pick) and the grid as many warps as the unfused launch's.
constexpr int kMaxCombinePairs = 32;

int combine_slots(int n_pairs) {
  int s = 1;
  while (s < n_pairs && s < kWarps) s *= 2;
  return s;
}

template <class T, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32, 4) moe_down_combine_kernel(MoeGemmParamsT<T> p, int slots) {
  __shared__ float ys[kMaxCombinePairs][kColsPerCta];  // [pair, column of the CTA] the outputs as y holds them
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int cols = kWarps / slots * kColsPerWarp;  // columns of this CTA
  const int g = warp / slots;                      // this warp's column group
  const int n0 = blockIdx.x * cols;
  for (int i = threadIdx.x; i < kMaxCombinePairs * kColsPerCta; i += blockDim.x) (&ys[0][0])[i] = 0.f;
  __syncthreads();
  int row[kColsPerWarp];
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) {
    const int n = n0 + g * kColsPerWarp + c;
    row[c] = n < p.n_out ? n : -1;
  }
  for (int b = warp % slots; b < p.max_blocks; b += slots) {
    const int e = p.block_expert[b];
    const int pair = p.block_pairs[static_cast<int64_t>(b) * kMoeBlockRows];
    if (e < 0 || pair < 0 || pair >= p.n_pairs) continue;  // the same for the whole warp
    const int xoff[1] = {pair / p.x_div * p.k};
    float acc[1][kColsPerWarp];
    warp_dot_rows<T, 1, kUnroll>(p, xoff, 1, p.w + static_cast<int64_t>(e) * p.n_out * p.k, row, acc);
    if (lane != 0) continue;
    T* y = p.y + static_cast<int64_t>(pair) * p.n_out;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      if (row[c] < 0) continue;
      const T v = from_f32<T>(acc[0][c]);
      y[row[c]] = v;
      ys[pair][g * kColsPerWarp + c] = to_f32(v);
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= cols || n0 + t >= p.n_out) return;
  float a = 0.f;
  for (int j = 0; j < p.n_pairs; ++j) a = fmaf(p.pick_w[j], ys[j][t], a);  // rank order, as moe_combine_kernel
  p.residual[n0 + t] += a;
}

// One thread per (token, column): grid (n_tokens, column tiles of kCombineThreads). A decode step has a single
// token, and one CTA looping over its columns was latency-bound (each column's k loads in turn); here every thread
// issues kCombineBatch picks' loads at once, then sums them in rank order.
constexpr int kCombineThreads = 128;
constexpr int kCombineBatch = 8;

template <class T>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const int c = blockIdx.y * kCombineThreads + threadIdx.x;
  if (c >= p.n_embd) return;
  const int64_t pr0 = static_cast<int64_t>(t) * p.k;
  const int64_t row = static_cast<int64_t>(t) * p.n_embd;
  float a = 0.f;
  for (int j0 = 0; j0 < p.k; j0 += kCombineBatch) {
    float w[kCombineBatch], v[kCombineBatch];
#pragma unroll
    for (int q = 0; q < kCombineBatch; ++q) {  // loads only: no store between them, all in flight together
      const int64_t pr = pr0 + j0 + q;
      const bool in = j0 + q < p.k;
      w[q] = in ? p.pick_w[pr] : 0.f;
      v[q] = in ? to_f32(p.y[(p.y_row ? p.y_row[pr] : pr) * p.n_embd + c]) : 0.f;
    }
#pragma unroll
    for (int q = 0; q < kCombineBatch; ++q) a = fmaf(w[q], v[q], a);  // past k: fma(0, 0, a) = a
  }
  if (p.shared) a += (p.shared_gate ? p.shared_gate[t] : 1.f) * to_f32(p.shared[row + c]);
  if (p.out) p.out[row + c] = from_f32<T>(a);
  else p.residual[row + c] += a;
}

template <class T>
__global__ void moe_gather_kernel(const T* x, const int32_t* packed_pair, int x_div, int n, T* out) {
  pdl_wait();
  const int r = blockIdx.x;
  const T* src = x + static_cast<int64_t>(packed_pair[r] / x_div) * n;
  T* dst = out + static_cast<int64_t>(r) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) dst[c] = src[c];
}

// Column tiles (grid y) of launch_moe_gemm for n_out outputs.
int moe_gemm_col_tiles(int n_out, bool swiglu_out) {
  const int per_cta = swiglu_out ? kColsPerCta / 2 : kColsPerCta;
  return (n_out + per_cta - 1) / per_cta;
}

}  // namespace

template <class T>
cudaError_t launch_moe_gather(const T* x, const int32_t* packed_pair, int x_div, int n_rows, int n, T* out,
                              cudaStream_t stream) {
  if (n_rows <= 0) return cudaSuccess;
  if (n <= 0 || x_div <= 0) return cudaErrorInvalidValue;
  return launch_pdl(moe_gather_kernel<T>, dim3(n_rows), dim3(256), 0, stream, x, packed_pair, x_div, n, out);
}


template <class T>
cudaError_t launch_moe_gemm(const MoeGemmParamsT<T>& p, cudaStream_t stream) {
  if (p.max_blocks <= 0 || p.n_out <= 0) return cudaSuccess;
  if (p.k <= 0 || p.k % 8 != 0 || p.x_div <= 0) return cudaErrorInvalidValue;
  const dim3 block(kWarps * 32);
  if (p.residual) {
    if (p.swiglu_out || !p.one_pair_per_block || !p.pick_w || p.n_pairs <= 0 || p.n_pairs > kMaxCombinePairs)
      return cudaErrorInvalidValue;
    const int slots = combine_slots(p.n_pairs), cols = kWarps / slots * kColsPerWarp;
    return launch_pdl_decode(moe_down_combine_kernel<T, 2>, dim3((p.n_out + cols - 1) / cols), block, 0, stream, p,
                             slots);
  }
  const int tiles = moe_gemm_col_tiles(p.n_out, p.swiglu_out);
  if (tiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid(p.max_blocks, tiles);
  if (p.one_pair_per_block)
    return p.swiglu_out ? launch_pdl_decode(moe_gemm_kernel<T, true, 1, 2>, grid, block, 0, stream, p)
                        : launch_pdl_decode(moe_gemm_kernel<T, false, 1, 2>, grid, block, 0, stream, p);
  return p.swiglu_out ? launch_pdl_decode(moe_gemm_kernel<T, true, kMoeBlockRows, 2>, grid, block, 0, stream, p)
                      : launch_pdl_decode(moe_gemm_kernel<T, false, kMoeBlockRows, 2>, grid, block, 0, stream, p);
}

template <class T>
cudaError_t launch_moe_combine(const MoeCombineParamsT<T>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  if (p.k <= 0 || p.n_embd <= 0 || (!p.out && !p.residual) || (p.shared_gate && !p.shared))
    return cudaErrorInvalidValue;
  return launch_pdl_decode(moe_combine_kernel<T>, dim3(p.n_tokens, (p.n_embd + kCombineThreads - 1) / kCombineThreads),
                    dim3(kCombineThreads), 0, stream, p);
}

template cudaError_t launch_moe_gemm<bf16>(const MoeGemmParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_moe_gemm<float>(const MoeGemmParamsT<float>&, cudaStream_t);
template cudaError_t launch_moe_combine<bf16>(const MoeCombineParamsT<bf16>&, cudaStream_t);
template cudaError_t launch_moe_combine<float>(const MoeCombineParamsT<float>&, cudaStream_t);
template cudaError_t launch_moe_gather<bf16>(const bf16*, const int32_t*, int, int, int, bf16*, cudaStream_t);
template cudaError_t launch_moe_gather<float>(const float*, const int32_t*, int, int, int, float*, cudaStream_t);

}  // namespace mopt::cuda
