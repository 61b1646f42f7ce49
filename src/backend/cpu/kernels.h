// CPU compute kernels for the transformer forward pass: matmul over every weight dtype, norms, RoPE,
// activations and paged causal attention. AVX2+FMA+F16C fast paths with a portable scalar fallback
// (selected when __AVX2__ is not defined, e.g. -DMOPT_PORTABLE=ON).
//
// Numerics: F32/F16/BF16 weights are multiplied in fp32. Q8_0/Q4_0 weights use activations quantized
// to Q8_0 (per 32 elements, scale amax/127) and integer dot products; K-quant weights use activations
// quantized to Q8_K (per 256 elements). The result then differs from the fp32 product of the
// dequantized weights by the activation rounding error:
//   |err| <= sum over activation blocks b of sum_{i in b} |w_i| * max_{i in b} |x_i| * (1/254 + e),
// e = 1/2048 for Q8_0 (its scale is stored as fp16), 0 for Q8_K; plus fp32 summation rounding.
// Q4_0 and Q8_0 use AVX-VNNI (vpdpbusd) when the CPU has it, selected at run time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"

namespace mopt::cpu {

// y[M, N] = x[M, K] · W^T. W: TensorView with ne[0] = K, ne[1] = N, any weight dtype (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K). x, y fp32 row-major, row strides K and N. Threads split over N (and M when large).
// Results do not depend on the number of threads (each output is computed by the same code either way).
void matmul(const TensorView& w, const float* x, int64_t M, float* y, ThreadPool* pool);
// Same for a raw weight pointer (rows of K elements of dtype t, N rows).
void matmul_raw(DType t, const void* w, int64_t N, int64_t K, const float* x, int64_t M, float* y, ThreadPool* pool);
// True if matmul supports weights of dtype t with K elements per row (K a multiple of the block size).
bool matmul_supports(DType t, int64_t K);

// fp32 weights repacked for batched products (matmul_packed.cpp): panels of kPackedPanel output rows stored
// k-major, data [n_panels, K, kPackedPanel], the last panel zero-padded. Several matrices with the same K can be
// packed as one (their outputs concatenated), so e.g. Q, K and V share one pass over the activations.
inline constexpr int64_t kPackedPanel = 16;
struct PackedF32 {
  int64_t N = 0, K = 0;     // outputs (all parts together), inputs
  std::vector<float> data;  // [ceil(N / kPackedPanel), K, kPackedPanel]
};
struct PackSource {
  const float* w;  // [N, K] row-major
  int64_t N, K;
};
PackedF32 pack_f32(std::span<const PackSource> parts);
// The same into `out`, reusing its storage (loops that pack matrices of one size again and again).
void pack_f32(std::span<const PackSource> parts, PackedF32& out);
// y[M, N] = x[M, K] · W^T for packed W. Each output is the fp32 FMA chain over k = 0..K-1 in order, so results
// are bit-identical whatever M, the tiling, the thread count or the instruction set (batch invariance).
// AVX-512 kernels are used where the CPU has AVX-512F unless allow_avx512 is false (tests compare both).
void matmul_packed(const PackedF32& w, const float* x, int64_t M, float* y, ThreadPool* pool,
                   bool allow_avx512 = true);
bool matmul_packed_has_avx512();

void rmsnorm(float* out, const float* x, const float* weight, int64_t n, float eps);  // out may == x

// Rotary embedding of one token's heads in place: x [n_heads, head_dim]; dims [0, rot_dim) rotated.
// inv_freq [rot_dim/2] from rope_inv_freq() (backend/rope.h); style kInterleaved pairs (2i, 2i+1), kNeox pairs
// (i, i+rot_dim/2).
void rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, const float* inv_freq, RopeStyle style);
// rope() in two steps, so that one token's angles serve all its heads and layers (same results as rope()):
// cs[i], sn[i] = cos, sin of pos * inv_freq[i] for i < half, then the rotation with those tables.
void rope_table(int pos, const float* inv_freq, int half, float* cs, float* sn);
void rope_apply(float* x, int n_heads, int head_dim, int rot_dim, const float* cs, const float* sn, RopeStyle style);

void swiglu(float* out, const float* gate, const float* up, int64_t n);  // out = silu(gate) * up
void softmax(float* x, int64_t n);
void add(float* y, const float* x, int64_t n);  // y += x

// Paged causal attention over a flat varlen batch (both prefill and decode).
struct PagedAttnArgs {
  const float* q;              // [n_tokens, n_head, head_dim]
  float* out;                  // [n_tokens, n_head, head_dim]
  const void* k_cache;         // [n_blocks, block_size, n_head_kv, head_dim] of kv_dtype (one layer), or transposed
  const void* v_cache;         // the same for V
  int n_head, n_head_kv, head_dim, block_size;
  int n_seqs;
  const int32_t* query_start;  // [n_seqs + 1]
  const int32_t* seq_lens;     // [n_seqs] context length incl. this step's tokens (already written to the cache)
  const int32_t* positions;    // [n_tokens]; token at position p attends to positions 0..p of its sequence
  const int32_t* block_tables; // [n_seqs, max_blocks_per_seq]; position j lives in block_tables[s][j / block_size]
  int max_blocks_per_seq;
  float scale;                 // usually 1/sqrt(head_dim)
  int sliding_window = 0;      // 0 = none; else attend only to positions > p - sliding_window
  DType kv_dtype = DType::F32; // cache elements: F32 or F16 (widened exactly to fp32; same arithmetic after)
  // K and V blocks stored transposed (the CPU runner's layout, see transposed_index()). Attention then runs on
  // 16 consecutive positions per vector (both flags must be equal; head_dim <= kMaxTransposedHeadDim).
  // Row-major otherwise.
  bool k_transposed = false;
  bool v_transposed = false;
};

// The transposed K/V layout of one cache layer: per block and KV head, the block's positions in tiles of W,
// [n_blocks][n_head_kv][block_size / W][head_dim][W], with W = 16 where block_size is a multiple of 16, else
// W = block_size ([n_blocks][n_head_kv * head_dim][block_size]). A 16-position chunk of one head is then one
// contiguous [head_dim][16] tile, whatever the block size: attention streams a head's chunks in order, and a
// token's K (or V) write touches head_dim x 16 x (element size) bytes per head instead of head_dim rows of
// block_size (stories260K, blocks of 64, 64 sequences: +3% decode tokens/s against rows of 64).
inline int transposed_tile(int block_size) { return block_size % 16 == 0 ? 16 : block_size; }
// Element offset of row e (= kv head * head_dim + dim) of slot o in block b.
inline int64_t transposed_index(int64_t b, int e, int o, int n_head_kv, int head_dim, int block_size) {
  const int W = transposed_tile(block_size), h = e / head_dim, d = e % head_dim;
  return ((b * n_head_kv + h) * head_dim) * block_size + static_cast<int64_t>(o / W) * head_dim * W +
         static_cast<int64_t>(d) * W + o % W;
}
// Largest head_dim of the transposed layout (its kernel holds a head pair's query broadcasts in a local array).
inline constexpr int kMaxTransposedHeadDim = 256;
// Instruction sets the transposed-layout kernel may use (tests compare them; kBest in production): AVX-512 where
// the CPU has it, else AVX2 (bit-identical results); kScalar: plain C++ (std::exp: close, not bit-identical).
enum class AttnIsa { kBest, kNoAvx512, kScalar };
// Threads over (token, kv head); each K/V read serves the whole query-head group (GQA).
// The caller validates the batch (block ids, positions < seq_lens); violated invariants abort.
void paged_attention(const PagedAttnArgs& a, ThreadPool* pool, AttnIsa isa = AttnIsa::kBest);

}  // namespace mopt::cpu
