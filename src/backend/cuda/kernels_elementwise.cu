// Elementwise and normalization kernels: embedding, fused add+RMSNorm, SwiGLU, dtype conversion and seeded random
// fill (q/k-norm + RoPE + KV-cache write: rope_cache.cu). Memory-bound; each is one pass over its data.
// Templated on the storage type T (bf16 or float, see storage.cuh); arithmetic is fp32 in both.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/fp8_act.cuh"
#include "backend/cuda/func_attr.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/storage.cuh"
#include "backend/cuda/warp_reduce.cuh"

namespace mopt::cuda {
namespace {

constexpr int kThreads = 256;

// Sum over the CTA (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

template <class T>
__global__ void embed_kernel(EmbedParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const int tok = p.tokens[t];
  float* out = p.out + static_cast<int64_t>(t) * p.n_embd;
  if (tok < 0 || tok >= p.n_vocab) {  // validated on the host; padding rows may carry anything
    for (int i = threadIdx.x; i < p.n_embd; i += blockDim.x) out[i] = 0.f;
    return;
  }
  const T* row = p.table + static_cast<int64_t>(tok) * p.n_embd;
  for (int i = threadIdx.x; i < p.n_embd; i += blockDim.x) out[i] = to_f32(row[i]);
}

// Elements [8 c, 8 c + 8) of a row of n as floats (0 past n). kVec: n % 8 == 0 and 16-byte aligned rows, so one
// 16-byte load per 8 bf16 (two for fp32); otherwise one guarded load per element.
template <bool kVec, class S>
__device__ __forceinline__ void load_chunk(const S* row, int c, int n, float* f) {
  if constexpr (kVec) {
    unpack8(load8(row + 8 * c), f);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = 8 * c + e < n ? to_f32(row[8 * c + e]) : 0.f;
  }
}

// The inverse: f[e] rounded to S (f holds S values already where the caller rounded them).
template <bool kVec, class S>
__device__ __forceinline__ void store_chunk(S* row, int c, int n, const float* f) {
  if constexpr (kVec) {
    store8(row + 8 * c, f);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (8 * c + e < n) row[8 * c + e] = from_f32<S>(f[e]);
  }
}

// One CTA per row; each thread owns kC chunks of 8 consecutive elements (chunk c = threadIdx.x + k blockDim.x),
// all loaded before any is used (one memory round trip, which a decode batch of few rows cannot hide otherwise)
// and kept in registers through the passes: the new residual, the normalized outputs rounded to T, their max |.|
// and E4M3 codes.
template <class T, int kC, bool kVec>
__global__ void __launch_bounds__(512) rmsnorm_kernel(RmsNormParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const int64_t i = p.rows ? p.rows[r] : r;
  float* res = p.residual + i * p.n;
  const T* add = p.add ? p.add + i * p.n : nullptr;
  const bool scaled = add && p.add_row_scale;
  const float add_rs = scaled ? p.add_row_scale[i] : 0.f;
  const int n = p.n;
  // Up to 2 chunks a thread, every load of the row is issued before any is used (one memory round trip): the
  // residual, the added row and its deferred column scales, the norm weight. With 4, the scales and the weight
  // are loaded where they are used (their registers would not fit 512 threads).
  constexpr bool kEarly = kC <= 2;
  float v[kC][8], a[kC][8], cs[kC][8], w[kC][8];
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (8 * c >= n) continue;
    load_chunk<kVec>(res, c, n, v[k]);
    if (add) load_chunk<kVec>(add, c, n, a[k]);
    if (kEarly && scaled) load_chunk<kVec>(p.add_col_scale, c, n, cs[k]);
    if (kEarly) load_chunk<kVec>(p.weight, c, n, w[k]);
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (8 * c >= n) continue;
    if (add) {
      if (!kEarly && scaled) load_chunk<kVec>(p.add_col_scale, c, n, cs[k]);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[k][e] += scaled ? a[k][e] * (add_rs * cs[k][e]) : a[k][e];  // FP8 GEMM scales
      store_chunk<kVec>(res, c, n, v[k]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[k][e] * v[k][e];
  }
  const float rstd = rsqrtf(block_sum(ss) / static_cast<float>(n) + p.eps);
  T* out = p.out ? p.out + static_cast<int64_t>(r) * n : nullptr;
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < kC; ++k) {  // v becomes the output, rounded to T
    const int c = threadIdx.x + k * blockDim.x;
    if (8 * c >= n) continue;
    if (!kEarly) load_chunk<kVec>(p.weight, c, n, w[k]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      v[k][e] = to_f32(from_f32<T>(v[k][e] * rstd * w[k][e]));
      amax = fmaxf(amax, fabsf(v[k][e]));
    }
    if (out) store_chunk<kVec>(out, c, n, v[k]);
  }
  if (!p.q_out) return;
  // FP8 output (fp8_act.cuh): the codes of the rounded outputs, as launch_quantize_rows_fp8 would write them
  // reading `out` (n % 16 == 0 and q_out 16-byte aligned: launch_rmsnorm checks; then kVec).
  const Fp8RowScale s = fp8_row_scale(block_max_nonneg(amax));
  if (threadIdx.x == 0) p.q_scale[r] = s.d;
  uint8_t* q = p.q_out + static_cast<int64_t>(r) * n;
#pragma unroll
  for (int k = 0; k < kC; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (8 * c >= n) continue;
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) word[e / 4] |= fp8_act_code(v[k][e], s) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(q + 8 * c) = make_uint2(word[0], word[1]);
  }
}

// silu(g) * u of one element in fp32, the gate's and up's values first scaled by an FP8 GEMM's deferred scales
// (rs: the row's; cg, cu: the two columns'; launch_fp8_scale_epilogue's order) when `scaled`.
template <class T>
__device__ __forceinline__ float swiglu_one(float g, float u, bool scaled, float rs, float cg, float cu) {
  if (scaled) {
    g *= rs * cg;
    u *= rs * cu;
  }
  // bf16 keeps the fast exp (its output rounding dominates); fp32 uses the accurate one, like the CPU.
  const float e = sizeof(T) == 2 ? __expf(-g) : expf(-g);
  return g / (1.f + e) * u;
}

template <class T>
__global__ void swiglu_kernel(SwiGluParamsT<T> p) {
  pdl_wait();
  pdl_trigger();
  const int64_t total = static_cast<int64_t>(p.n_tokens) * p.n_ff;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / p.n_ff, j = i % p.n_ff;
    const T* row = p.gate_up + t * 2 * p.n_ff;
    const bool scaled = p.row_scale != nullptr;
    const float v = swiglu_one<T>(to_f32(row[j]), to_f32(row[p.n_ff + j]), scaled, scaled ? p.row_scale[t] : 0.f,
                                  scaled ? p.col_scale[j] : 0.f, scaled ? p.col_scale[p.n_ff + j] : 0.f);
    p.out[i] = from_f32<T>(v);
  }
}

// SwiGLU with FP8 output (SwiGluParamsT::q_out): one CTA of kThreads per token row, 8 consecutive outputs (a
// chunk: 16-byte loads of gate and up for bf16) per thread and step, kSwiGluUnroll chunks' loads issued before any
// is used (a decode batch has few rows, so few CTAs: each needs many bytes in flight; launch_swiglu gives those
// 512 threads, many rows 256). Pass 1: the outputs rounded to T (written to `out` when set) and their max |.|;
// pass 2: their codes. kStage: pass 1 keeps the row's outputs in shared memory (n_ff T values, dynamic), which
// pass 2 reads; otherwise (rows too long for it) pass 2 recomputes them from gate|up (this CTA's row, read again
// from L1 / L2). Both give the codes launch_quantize_rows_fp8 would give reading `out`.
constexpr size_t kSwiGluStageMax = 48 * 1024;  // dynamic shared memory without an opt-in

// Chunks whose loads a thread issues together: 4 (gate and up: 32 bytes each), or 2 with an FP8 GEMM's deferred
// column scales (and their 64 bytes: loaded with the values, not after them, which cost a second L2 round trip).
template <bool kScaled>
constexpr int kSwiGluUnroll = kScaled ? 2 : 4;

// f(c, o) for each chunk c of this thread in row `gate` / `up`, o[8] the chunk's outputs rounded to T. kScaled:
// p.row_scale is set (rs its value for this row).
template <int kThreads, bool kScaled, class T, class F>
__device__ __forceinline__ void swiglu_row_chunks(const SwiGluParamsT<T>& p, const T* gate, const T* up, float rs,
                                                  F&& f) {
  constexpr int kU = kSwiGluUnroll<kScaled>;
  const int n_chunks = p.n_ff / 8;
  for (int c0 = threadIdx.x; c0 < n_chunks; c0 += kU * kThreads) {
    Raw8<T> rg[kU], ru[kU];
    Raw8<float> sg[kU], su[kU];  // kScaled: the chunk's 8 column scales of gate and of up
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const int c = c0 + i * kThreads;
      if (c < n_chunks) {
        rg[i] = load8(gate + 8 * c);
        ru[i] = load8(up + 8 * c);
        if constexpr (kScaled) {  // 16-byte aligned rows: n_ff % 16 == 0 (launch_swiglu checks)
          sg[i] = load8(p.col_scale + 8 * c);
          su[i] = load8(p.col_scale + p.n_ff + 8 * c);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const int c = c0 + i * kThreads;
      if (c >= n_chunks) break;
      float g[8], u[8], cg[8] = {}, cu[8] = {};
      unpack8(rg[i], g);
      unpack8(ru[i], u);
      if constexpr (kScaled) {
        unpack8(sg[i], cg);
        unpack8(su[i], cu);
      }
      T o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = from_f32<T>(swiglu_one<T>(g[e], u[e], kScaled, rs, cg[e], cu[e]));
      f(c, o);
    }
  }
}

template <class T, int kThreads, bool kStage, bool kScaled>
__global__ void __launch_bounds__(kThreads, 768 / kThreads) swiglu_quant_kernel(SwiGluParamsT<T> p) {
  extern __shared__ __align__(16) unsigned char swiglu_stage[];
  T* stage = reinterpret_cast<T*>(swiglu_stage);  // [n_ff] with kStage
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const T* gate = p.gate_up + t * 2 * p.n_ff;
  const T* up = gate + p.n_ff;
  const float rs = kScaled ? p.row_scale[t] : 0.f;
  float amax = 0.f;
  T* out = p.out ? p.out + t * p.n_ff : nullptr;
  swiglu_row_chunks<kThreads, kScaled>(p, gate, up, rs, [&](int c, const T* o) {
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(to_f32(o[e])));
    if (out) {
#pragma unroll
      for (int e = 0; e < 8; ++e) out[8 * c + e] = o[e];
    }
    if constexpr (kStage) {
#pragma unroll
      for (int e = 0; e < 8; ++e) stage[8 * c + e] = o[e];
    }
  });
  const Fp8RowScale s = fp8_row_scale(block_max_nonneg(amax));  // its __syncthreads also publishes `stage`
  if (threadIdx.x == 0) p.q_scale[t] = s.d;
  uint8_t* q = p.q_out + t * p.n_ff;
  auto store_codes = [&](int c, const T* o) {
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) word[e / 4] |= fp8_act_code(to_f32(o[e]), s) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(q + 8 * c) = make_uint2(word[0], word[1]);
  };
  if constexpr (kStage) {
    for (int c = threadIdx.x; c < p.n_ff / 8; c += kThreads) store_codes(c, stage + 8 * c);
  } else {
    swiglu_row_chunks<kThreads, kScaled>(p, gate, up, rs, store_codes);
  }
}

// out[i] = D(in[i]) through fp32 (exact for every source type used here: f32, f16, bf16).
template <class S, class D>
__global__ void convert_kernel(const S* in, D* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f32<D>(to_f32(in[i]));
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void fill_random_kernel(T* out, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(seed * 0x2545f4914f6cdd1dull ^ static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
    out[i] = from_f32<T>(offset + scale * u);
  }
}

// Reads n16 16-byte words and writes nothing (unless their xor equals `never`, which callers make impossible):
// fills the L2 with clean lines, unlike a memset, whose dirty lines a timed kernel would have to write back.
__global__ void read_sweep_kernel(const uint4* p, int64_t n16, uint32_t never, uint32_t* sink) {
  uint32_t x = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == never && sink) *sink = x;
}

// Order-preserving 64-bit key of (value, index): larger value first, then the lower index; 0 = nothing seen.
// The value's bits are mapped so that unsigned order is float order (negatives flipped, positives offset).
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(i));
}

// Grid (n_rows, slices): each CTA reduces its slice of a row to the best key (NaN skipped), folded into
// keys[row] with atomicMax; the last CTA of the row (ticket) writes the token (and its logit into values, when
// given) and resets key and ticket to 0.
__global__ void argmax_kernel(const float* logits, int n_vocab, int32_t* tokens, float* values,
                              unsigned long long* keys, uint32_t* tickets) {
  pdl_wait();
  pdl_trigger();
  const int row = blockIdx.x;
  const float* r = logits + static_cast<int64_t>(row) * n_vocab;
  const int per = (n_vocab + gridDim.y - 1) / gridDim.y;
  const int b = blockIdx.y * per, e = min(n_vocab, b + per);
  unsigned long long best = 0;
  for (int i = b + static_cast<int>(threadIdx.x); i < e; i += blockDim.x) {
    const float v = r[i];
    if (v == v) best = max(best, argmax_key(v, i));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  __shared__ unsigned long long sk[32];
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sk[warp] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) best = max(best, sk[w]);
  if (best != 0) atomicMax(keys + row, best);
  __threadfence();
  last = atomicAdd(tickets + row, 1u) == gridDim.y - 1;
  if (!last) return;
  __threadfence();
  const unsigned long long k = atomicExch(keys + row, 0ull);  // every slice's atomicMax is in: read and reset
  tickets[row] = 0u;
  const int32_t tok = k == 0 ? 0 : static_cast<int32_t>(~static_cast<uint32_t>(k));
  tokens[row] = tok;
  if (values) values[row] = k == 0 ? __int_as_float(0x7fc00000) : r[tok];
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65536 ? (blocks < 1 ? 1 : blocks) : 65536);
}

}  // namespace

template <class T>
cudaError_t launch_embed(const EmbedParamsT<T>& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return cudaSuccess;
  return launch_pdl_decode(embed_kernel<T>, dim3(p.n_tokens), dim3(kThreads), 0, stream, p);
}

template <class T>
cudaError_t launch_rmsnorm(const RmsNormParamsT<T>& p, cudaStream_t stream) {
  if (p.n_rows_out <= 0) return cudaSuccess;
  if (p.add_row_scale && !p.add_col_scale) return cudaErrorInvalidValue;
  if (p.q_out ? !p.q_scale || p.q_scale == p.add_row_scale || p.n % 16 != 0 ||
                    reinterpret_cast<uintptr_t>(p.q_out) % 16 != 0
              : !p.out)
    return cudaErrorInvalidValue;
  // Chunks of 8 per thread: 1 up to 512 threads' worth, then 2 and 4 (n up to kRmsNormMaxN; 512 threads of the
  // 4-chunk kernel's ~96 registers fit an SM's register file).
  const int chunks = (p.n + 7) / 8;
  if (p.n > kRmsNormMaxN) return cudaErrorInvalidValue;
  const int kc = chunks <= 512 ? 1 : chunks <= 1024 ? 2 : 4;
  const int threads = std::max(32, ((chunks + kc - 1) / kc + 31) / 32 * 32);
  const bool vec = p.n % 8 == 0;
  const dim3 grid(p.n_rows_out), block(threads);
  auto go = [&](auto kernel) { return launch_pdl(kernel, grid, block, 0, stream, p); };
  if (vec) {
    if (kc == 1) return go(rmsnorm_kernel<T, 1, true>);
    if (kc == 2) return go(rmsnorm_kernel<T, 2, true>);
    return go(rmsnorm_kernel<T, 4, true>);
  }
  if (kc == 1) return go(rmsnorm_kernel<T, 1, false>);
  if (kc == 2) return go(rmsnorm_kernel<T, 2, false>);
  return go(rmsnorm_kernel<T, 4, false>);
}

template <class T>
cudaError_t launch_swiglu(const SwiGluParamsT<T>& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.n_tokens) * p.n_ff;
  if (n <= 0) return cudaSuccess;
  if (p.row_scale && !p.col_scale) return cudaErrorInvalidValue;
  if (p.q_out) {
    if (!p.q_scale || p.q_scale == p.row_scale || p.n_ff % 16 != 0 ||
        (reinterpret_cast<uintptr_t>(p.q_out) | reinterpret_cast<uintptr_t>(p.gate_up) |
         reinterpret_cast<uintptr_t>(p.row_scale ? p.col_scale : nullptr)) % 16 != 0)
      return cudaErrorInvalidValue;
    // Few rows (decode batches): fewer CTAs than SMs, so more threads per row.
    const size_t stage = static_cast<size_t>(p.n_ff) * sizeof(T);
    const bool wide = p.n_tokens <= 128, staged = stage <= kSwiGluStageMax, scaled = p.row_scale != nullptr;
    auto go = [&](auto kernel, int threads) {
      return launch_pdl(kernel, dim3(p.n_tokens), dim3(threads), staged ? stage : 0, stream, p);
    };
    auto pick = [&](auto stage_c, auto scaled_c) {
      constexpr bool kStage = decltype(stage_c)::value, kScaled = decltype(scaled_c)::value;
      return wide ? go(swiglu_quant_kernel<T, 512, kStage, kScaled>, 512)
                  : go(swiglu_quant_kernel<T, 256, kStage, kScaled>, 256);
    };
    const std::true_type yes;
    const std::false_type no;
    if (staged) return scaled ? pick(yes, yes) : pick(yes, no);
    return scaled ? pick(no, yes) : pick(no, no);
  }
  if (!p.out) return cudaErrorInvalidValue;
  return launch_pdl(swiglu_kernel<T>, dim3(grid_for(n)), dim3(kThreads), 0, stream, p);
}

cudaError_t launch_argmax(const float* logits, int n_rows, int n_vocab, int32_t* tokens, void* scratch,
                          cudaStream_t stream, float* values) {
  if (n_rows <= 0) return cudaSuccess;
  if (n_vocab <= 0 || scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 8 != 0) return cudaErrorInvalidValue;
  constexpr int kElemsPerCta = 2048;  // ~8 loads per thread: a 128k vocabulary spreads over 63 CTAs per row
  const int slices = min(kArgmaxMaxSlices, (n_vocab + kElemsPerCta - 1) / kElemsPerCta);
  auto* keys = static_cast<unsigned long long*>(scratch);
  auto* tickets = reinterpret_cast<uint32_t*>(keys + n_rows);
  return launch_pdl_decode(argmax_kernel, dim3(n_rows, slices), dim3(256), 0, stream, logits, n_vocab, tokens, values,
                           keys, tickets);
}

namespace {
template <class S, class D>
cudaError_t launch_convert(const S* in, D* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  convert_kernel<S, D><<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream) {
  return launch_convert(in, out, n, stream);
}

cudaError_t launch_f16_to_bf16(const uint16_t* in, bf16* out, int64_t n, cudaStream_t stream) {
  return launch_convert(reinterpret_cast<const __half*>(in), out, n, stream);
}

cudaError_t launch_f16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream) {
  return launch_convert(reinterpret_cast<const __half*>(in), out, n, stream);
}

cudaError_t launch_bf16_to_f32(const bf16* in, float* out, int64_t n, cudaStream_t stream) {
  return launch_convert(in, out, n, stream);
}

cudaError_t use_decode_carveout(const void* kernel) {
  return set_func_attr_once(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, kDecodeCarveoutPercent);
}

cudaError_t launch_read_sweep(const void* p, size_t bytes, cudaStream_t stream) {
  if (bytes < 16) return cudaSuccess;
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return cudaErrorInvalidValue;
  const int64_t n16 = static_cast<int64_t>(bytes / 16);
  // sink = nullptr: the impossible store is also skipped when the xor happens to match.
  read_sweep_kernel<<<grid_for(n16), kThreads, 0, stream>>>(static_cast<const uint4*>(p), n16, 0u, nullptr);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_fill_random(T* out, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  fill_random_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(out, n, seed, scale, offset);
  return cudaGetLastError();
}

// One warp per row: out[r] = sqrt(n_in) * ||w[r, :] * g||_2 + |bias[r]| (kernels.h, KvRowBoundParams).
__global__ void kv_row_bounds_kernel(KvRowBoundParams p) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= p.n_rows) return;
  const bf16* w = p.w + static_cast<int64_t>(r) * p.n_in;
  float ss = 0.f;
  for (int i = lane; i < p.n_in; i += 32) {
    const float v = to_f32(w[i]) * to_f32(p.g[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  if (lane == 0)
    p.out[r] = sqrtf(static_cast<float>(p.n_in)) * sqrtf(ss) + (p.bias ? fabsf(to_f32(p.bias[r])) : 0.f);
}

cudaError_t launch_kv_row_bounds(const KvRowBoundParams& p, cudaStream_t stream) {
  if (p.n_rows <= 0) return cudaSuccess;
  if (p.n_in <= 0 || p.w == nullptr || p.g == nullptr || p.out == nullptr) return cudaErrorInvalidValue;
  constexpr int kWarps = 4;
  kv_row_bounds_kernel<<<(p.n_rows + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

// The two storage types of every templated launcher.
#define MOPT_INSTANTIATE_ELEMENTWISE(T)                                                                  \
  template cudaError_t launch_embed<T>(const EmbedParamsT<T>&, cudaStream_t);                           \
  template cudaError_t launch_rmsnorm<T>(const RmsNormParamsT<T>&, cudaStream_t);                       \
  template cudaError_t launch_swiglu<T>(const SwiGluParamsT<T>&, cudaStream_t);                         \
  template cudaError_t launch_fill_random<T>(T*, int64_t, uint64_t, float, float, cudaStream_t);
MOPT_INSTANTIATE_ELEMENTWISE(bf16)
MOPT_INSTANTIATE_ELEMENTWISE(float)
#undef MOPT_INSTANTIATE_ELEMENTWISE

}  // namespace mopt::cuda
