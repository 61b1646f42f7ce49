// CUDA kernels of the CUDA backend, framework-free: raw device pointers plus a parameter struct whose fields
// document their shapes (FlashInfer style). Every launcher enqueues on `stream`, allocates nothing and never
// synchronizes, so all of them can be captured into a CUDA graph. Launchers return the launch error (if any).
//
// Storage type: kernels whose parameter struct is a template (`...ParamsT<T>`) exist for T = bf16 (the default)
// and T = float (the runner's --dtype float32); both are instantiated from one source
// (arithmetic in fp32 in both, see storage.cuh). The tensor-core prefill and the skinny GEMM are bf16 only.
// KV cache element type C: the compute type T, or fp8 (E4M3, --kv-cache-dtype fp8) with T = bf16: the
// cache-write kernel quantizes, the attention kernels dequantize in registers (QkvRopeParamsT<bf16, fp8>,
// DecodeAttnParamsT<bf16, fp8>, PrefillAttnParamsT<fp8>).
//
// Paged KV cache layout (one allocation, block-major so that a block is one contiguous range for swapping):
//   cache[n_blocks][n_layer][2 (K, V)][n_head_kv][block_size][head_dim]   C
// A kernel of layer l sees `k_cache = cache + l * layer_stride`, `v_cache = k_cache + kv_stride`, and finds
// token slot s = block * block_size + off at  k_cache + block * block_stride + (h * block_size + off) * head_dim.
// fp8: the stored byte e of head h stands for K = decode_e4m3(e) * k_scale[h] (V: v_scale[h]); the scales are
// per layer and KV head (docs/cuda.md "FP8 KV cache": how the runner computes them).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/weight_format.h"

namespace mopt::cuda {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;  // one byte: sign, 4 exponent bits (bias 7), 3 mantissa bits; max 448, no infinity

// Where one layer's K and V live in the paged cache (strides in elements).
template <class T>
struct KvCacheViewT {
  T* k = nullptr;              // first K element of this layer in block 0
  T* v = nullptr;              // first V element of this layer in block 0
  int64_t block_stride = 0;    // elements between the same position of consecutive blocks
  int block_size = 0;          // token slots per block
  int n_head_kv = 0;
  int head_dim = 0;
  const float* k_scale = nullptr;  // [n_head_kv] fp8 caches only: K = stored value * k_scale[h] (> 0)
  const float* v_scale = nullptr;  // [n_head_kv] fp8 caches only: V = stored value * v_scale[h] (> 0)
};
using KvCacheView = KvCacheViewT<bf16>;

// ---- elementwise / normalization ------------------------------------------------------------------------

// out[t, :] = table[tokens[t], :] (T table -> fp32 residual stream)
template <class T>
struct EmbedParamsT {
  const int32_t* tokens = nullptr;  // [n_tokens]
  const T* table = nullptr;         // [n_vocab, n_embd]
  float* out = nullptr;             // [n_tokens, n_embd]
  int n_tokens = 0, n_embd = 0, n_vocab = 0;
};
template <class T>
cudaError_t launch_embed(const EmbedParamsT<T>& p, cudaStream_t stream);

// Fused residual add + RMSNorm. For each output row r reading input row i = rows ? rows[r] : r:
//   if add: residual[i] += add[i];   out[r] = residual[i] / rms(residual[i]) * weight
// With q_out (the input of an FP8 GEMM, Gemm::run_fp8): each output row, rounded to T, is also quantized per token
// exactly as launch_quantize_rows_fp8 would quantize `out` (the same codes and scales; fp8_act.cuh), and `out` may
// be null (then not written): no separate quantizer launch. q_out needs n % 16 == 0 and 16-byte alignment.
template <class T>
struct RmsNormParamsT {
  float* residual = nullptr;      // [n_rows_in, n] fp32, updated in place when `add` is set
  const T* add = nullptr;         // [n_rows_in, n] or null
  const T* weight = nullptr;      // [n]
  T* out = nullptr;               // [n_rows_out, n], or null with q_out
  const int32_t* rows = nullptr;  // [n_rows_out] rows of `residual` to normalize (null: identity)
  int n_rows_out = 0, n = 0;
  float eps = 1e-5f;
  // With add: add[i, j] stands for add_row_scale[i] * add_col_scale[j] * add[i, j] (an FP8 GEMM's unscaled output,
  // Gemm::run_fp8 with defer_scales), computed in fp32 as launch_fp8_scale_epilogue would, without its bf16 rounding.
  const float* add_row_scale = nullptr;  // [n_rows_in] or null (then add_col_scale is ignored)
  const float* add_col_scale = nullptr;  // [n]
  uint8_t* q_out = nullptr;              // [n_rows_out, n] E4M3 codes of out, or null
  float* q_scale = nullptr;              // [n_rows_out] their per-token scales (with q_out); not add_row_scale
};
inline constexpr int kRmsNormMaxN = 16384;  // the widest row launch_rmsnorm takes (cudaErrorInvalidValue past it)
template <class T>
cudaError_t launch_rmsnorm(const RmsNormParamsT<T>& p, cudaStream_t stream);

// Per token: optional per-head RMSNorm of q and k (Qwen3), RoPE on q and k, q written to q_out,
// k and v written into the paged cache at slot_mapping[t] (slot < 0: not written, e.g. batch padding).
// C = fp8: each K (V) value x of head h is stored as e4m3(x / k_scale[h]) (IEEE division, round to nearest
// even, saturating at +-448).
template <class T, class C = T>
struct QkvRopeParamsT {
  const T* qkv = nullptr;             // [n_tokens, (n_head + 2 * n_head_kv) * head_dim] q | k | v per row
  T* q_out = nullptr;                 // [n_tokens, n_head * head_dim]
  const int32_t* positions = nullptr; // [n_tokens]
  const int32_t* slot_mapping = nullptr;  // [n_tokens]
  const float* inv_freq = nullptr;    // [rope_dim / 2] (null: no RoPE)
  const T* q_norm = nullptr;          // [head_dim] or null
  const T* k_norm = nullptr;          // [head_dim] or null
  KvCacheViewT<C> cache;
  int n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  bool neox = false;                  // rotate_half pairs (i, i + rope_dim/2); else (2i, 2i+1)
  float norm_eps = 1e-6f;
  // qkv[t, c] stands for row_scale[t] * col_scale[c] * qkv[t, c] (an FP8 GEMM's unscaled output, as for
  // RmsNormParamsT's add scales). Null: qkv as is.
  const float* row_scale = nullptr;   // [n_tokens] or null (then col_scale is ignored)
  const float* col_scale = nullptr;   // [(n_head + 2 * n_head_kv) * head_dim]
};
template <class T, class C>
cudaError_t launch_qkv_rope_cache(const QkvRopeParamsT<T, C>& p, cudaStream_t stream);

// out[t, j] = silu(g) * u with g = gu[t, j], u = gu[t, n_ff + j]; with scales (the unscaled output of an FP8
// GEMM, Gemm::run_fp8 with defer_scales) g = row_scale[t] * col_scale[j] * gu[t, j] and
// u = row_scale[t] * col_scale[n_ff + j] * gu[t, n_ff + j] in fp32, as launch_fp8_scale_epilogue would compute them
// (without its bf16 rounding). With q_out, as RmsNormParamsT's: out's rows, rounded to T, quantized per token
// as launch_quantize_rows_fp8 would (same codes and scales), out then optional; one CTA per row (n_ff % 16 == 0,
// gate_up and q_out 16-byte aligned).
template <class T>
struct SwiGluParamsT {
  const T* gate_up = nullptr;     // [n_tokens, 2 * n_ff] gate | up
  T* out = nullptr;               // [n_tokens, n_ff], or null with q_out
  int n_tokens = 0, n_ff = 0;
  const float* row_scale = nullptr;  // [n_tokens] or null (then col_scale is ignored)
  const float* col_scale = nullptr;  // [2 * n_ff] (with row_scale)
  uint8_t* q_out = nullptr;          // [n_tokens, n_ff] E4M3 codes of out, or null
  float* q_scale = nullptr;          // [n_tokens] their per-token scales (with q_out); not row_scale
};
template <class T>
cudaError_t launch_swiglu(const SwiGluParamsT<T>& p, cudaStream_t stream);

// Conversions used when uploading weights (round to nearest even), and a seeded generator for dummy weights.
cudaError_t launch_f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream);
cudaError_t launch_f16_to_bf16(const uint16_t* in, bf16* out, int64_t n, cudaStream_t stream);
cudaError_t launch_f16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream);  // exact
cudaError_t launch_bf16_to_f32(const bf16* in, float* out, int64_t n, cudaStream_t stream);     // exact
// Reads [p, p + bytes) (16-byte aligned) and writes nothing: evicts the L2 with clean lines (GEMM tuning).
cudaError_t launch_read_sweep(const void* p, size_t bytes, cudaStream_t stream);
// out[i] = offset + scale * u(seed, i), u uniform in [-1, 1), rounded to T
template <class T>
cudaError_t launch_fill_random(T* out, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream);

// fp8 KV cache scales (backend/kv_fp8.h): out[r] = sqrt(n_in) * ||w[r, :] * g||_2 + |bias[r]| for the rows of
// w, a bound on |y_r| of y = W x + b over every RMSNorm output x = z / rms(z) * g. One warp per row.
struct KvRowBoundParams {
  const bf16* w = nullptr;     // [n_rows, n_in]
  const bf16* g = nullptr;     // [n_in] the RMSNorm weight before the projection
  const bf16* bias = nullptr;  // [n_rows] or null
  float* out = nullptr;        // [n_rows]
  int n_rows = 0, n_in = 0;
};
cudaError_t launch_kv_row_bounds(const KvRowBoundParams& p, cudaStream_t stream);

// ---- attention ------------------------------------------------------------------------------------------

// Paged attention, one query token per work item (decode, and prefill for head dims without a tensor-core
// kernel). Query token t of sequence seq = token_seq[t] attends to cached positions
// [max(0, positions[t] + 1 - window), positions[t]] of that sequence (causal; window 0 = unlimited).
// GQA: a CTA serves `heads_per_cta` query heads of one KV head, so each K/V row is read once for the group.
// Split-K in one launch: n_splits CTAs per (token, head group); token t uses
// decode_splits_used(context length, n_splits) of them (the rest exit), each writing a partial state to
// `workspace`, and the last to finish (ticket from counters[t * n_head_groups + group]) merges into `out` and
// resets its counter to 0. With n_splits > 1: workspace holds n_tokens * n_head * n_splits * (head_dim + 2)
// floats, counters n_tokens * n_head uint32 that must be ZERO before the first launch (cudaMemset once; every
// launch leaves them zero, so launches and CUDA graph replays can repeat). n_splits <= kDecodeMaxSplits.
constexpr int kDecodeMinSliceTokens = 32;  // default: a split covers at least this many cached tokens
constexpr int kDecodeMaxSplits = 32;
// Splits a token with `len` cached tokens in its window actually uses (>= 1), out of the launch's n_splits,
// when a split covers at least min_slice tokens.
constexpr int decode_splits_used(int len, int n_splits, int min_slice = kDecodeMinSliceTokens) {
  const int by_len = (len + min_slice - 1) / min_slice;
  return by_len < 1 ? 1 : (by_len < n_splits ? by_len : n_splits);
}
// C = fp8: dequantized in registers (k_scale folded into q, v_scale into the output).
template <class T, class C = T>
struct DecodeAttnParamsT {
  const T* q = nullptr;                 // [n_tokens, n_head, head_dim]
  T* out = nullptr;                     // [n_tokens, n_head, head_dim]
  const int32_t* positions = nullptr;   // [n_tokens]; a token with position < 0 is padding (output zeros)
  const int32_t* token_seq = nullptr;   // [n_tokens] sequence index of each token
  const int32_t* block_tables = nullptr;// [n_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  KvCacheViewT<C> cache;
  int n_tokens = 0, n_head = 0;
  int window = 0;
  float scale = 0.f;                    // softmax scale, usually 1/sqrt(head_dim)
  int n_splits = 1;                     // CTAs per (token, head group); see above
  int min_slice = kDecodeMinSliceTokens;// fewest cached tokens per used split (>= 1); see decode_splits_used
  int max_heads_per_cta = 0;            // query heads per CTA at most (0: the whole GQA group, up to 8)
  // Small-batch decode (the fused path): with <= 2 query heads per CTA, a shallow K/V pipeline (12 KiB of shared
  // memory) and the 32 KiB shared-memory configuration shared by every kernel of the fused decode step (see
  // kDecodeCarveoutPercent in launch.cuh), so consecutive kernels never wait for an SM to be reconfigured.
  bool small_smem = false;
  float* workspace = nullptr;           // split partials (n_splits > 1), see above
  uint32_t* counters = nullptr;         // [n_tokens * n_head] merge tickets, zero between launches (n_splits > 1)
};
using DecodeAttnParams = DecodeAttnParamsT<bf16>;
// Query heads one CTA of launch_attention_decode serves for a GQA group of `group` heads: the whole group, or its
// largest divisor <= max_heads_per_cta (0: up to 8). The grid has n_head / that many CTAs per (token, split).
int decode_heads_per_cta(int group, int max_heads_per_cta);
// True when the decode kernel supports this head_dim (8, 16, 32, 64, 128, 256).
bool decode_attention_supported(int head_dim);
template <class T, class C>
cudaError_t launch_attention_decode(const DecodeAttnParamsT<T, C>& p, cudaStream_t stream);
// Number of splits that fills the GPU for n_items (tokens x kv-head groups) CTAs, context up to max_ctx.
int choose_decode_splits(int n_ctas_without_split, int max_ctx, int n_sms, int min_slice = kDecodeMinSliceTokens);

// Flash-attention prefill over the paged cache (tensor cores, bf16 in, fp32 accumulate), head_dim 64 or 128.
// Work is a list of query tiles of 64 rows: tile i covers query tokens [tile_start[i], tile_start[i] + 64)
// clipped to tile_end[i] (exclusive), all belonging to sequence tile_seq[i]. Causal by absolute position.
// Cache C = bf16 or fp8 (converted to bf16 exactly when gathered into shared memory, scales folded in).
template <class C>
struct PrefillAttnParamsT {
  const bf16* q = nullptr;               // [n_tokens, n_head, head_dim]
  bf16* out = nullptr;                   // [n_tokens, n_head, head_dim]
  const int32_t* positions = nullptr;    // [n_tokens]
  const int32_t* tile_start = nullptr;   // [n_tiles]
  const int32_t* tile_end = nullptr;     // [n_tiles]
  const int32_t* tile_seq = nullptr;     // [n_tiles]
  const int32_t* block_tables = nullptr; // [n_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  KvCacheViewT<C> cache;
  int n_tiles = 0, n_head = 0;
  int window = 0;
  float scale = 0.f;
};
using PrefillAttnParams = PrefillAttnParamsT<bf16>;
inline constexpr int kPrefillTileRows = 64;
bool prefill_attention_supported(int head_dim);
template <class C>
cudaError_t launch_attention_prefill(const PrefillAttnParamsT<C>& p, cudaStream_t stream);

// ---- sampling ------------------------------------------------------------------------------------------

// tokens[r] = argmax_j logits[r, j] (lowest index on ties; NaN ignored; 0 for a row of NaN) and, where values is
// given, values[r] = that logit (NaN for a row of NaN). One launch of
// (n_rows, up to kArgmaxMaxSlices) CTAs, each reducing a slice of a row; they meet in `scratch`:
// argmax_scratch_bytes(n_rows), 8-byte aligned, ZERO before the first launch (every launch leaves it zero).
inline constexpr int kArgmaxMaxSlices = 64;
inline constexpr size_t argmax_scratch_bytes(int n_rows) { return static_cast<size_t>(n_rows) * 12; }
cudaError_t launch_argmax(const float* logits, int n_rows, int n_vocab, int32_t* tokens, void* scratch,
                          cudaStream_t stream, float* values = nullptr);

// Per row: greedy when temperature <= 0 or top_k == 1, else a draw from softmax(logits / T) restricted by
// top-k (0 = off), top-p (>= 1 = off) and min-p (0 = off), each computed on the full distribution (the kept
// set is their intersection), with u = hash(seeds[r]) (the caller mixes request seed and step). See sampling.cu.
struct SampleParams {
  const float* logits = nullptr;       // [n_rows, n_vocab]
  int32_t* tokens = nullptr;           // [n_rows]
  const float* temperature = nullptr;  // [n_rows] (null: greedy for all)
  const int32_t* top_k = nullptr;      // [n_rows] or null
  const float* top_p = nullptr;        // [n_rows] or null
  const float* min_p = nullptr;        // [n_rows] or null
  const uint64_t* seeds = nullptr;     // [n_rows] (required with temperature)
  // Token masks: mask_row[r] < 0: every id allowed; else row r may draw id t only where bit t%64 of word t/64 of
  // masks[mask_row[r] * mask_words ..] is set (the others count as -inf logits, greedy included).
  const int32_t* mask_row = nullptr;   // [n_rows] or null (no masks)
  const uint64_t* masks = nullptr;     // [n_masks, mask_words], mask_words = ceil(n_vocab / 64)
  int n_rows = 0, n_vocab = 0;
};
cudaError_t launch_sample(const SampleParams& p, cudaStream_t stream);

// ---- quantized weights (device layouts: quant_weights.h) -----------------------------------------------------

// WeightFormat, how a linear layer's weight matrix is stored on the device: weight_format.h.
inline constexpr int kNumWeightFormats = 4;
constexpr const char* weight_format_name(WeightFormat f) {
  return f == WeightFormat::kFp8 ? "fp8" : f == WeightFormat::kInt8 ? "int8" : f == WeightFormat::kNib4 ? "4-bit"
                                                                                                        : "float";
}
// weight_chunk_elems (the inputs of one 16-byte chunk of codes): weight_format.h.
struct QuantWeightView {
  WeightFormat fmt = WeightFormat::kFloat;
  const void* codes = nullptr;       // see above; 16-byte aligned
  const float* row_scale = nullptr;  // [n] or null
  const float* group = nullptr;      // [n, k / group_size (, 2)] or null (kNib4: required)
  int group_size = 0;                // inputs per group, a multiple of weight_chunk_elems(fmt); 0 without groups
  bool affine = false;               // groups hold (a, b); kNib4: always true
};

// out[n, k] = the dequantized weights, rounded to bf16 (the prefill path's workspace for cuBLASLt).
cudaError_t launch_dequant_weights_bf16(const QuantWeightView& w, int n, int k, bf16* out, cudaStream_t stream);
// Per-token FP8 activations (vLLM's dynamic per-token scheme, as the CPU backend's FP8 dot products): for each
// row r of x [m, k]: scale[r] = max_j |x[r, j]| / 448, q[r, j] = e4m3(x[r, j] * (1 / scale[r])) rounded to
// nearest even and saturated (a zero row: scale 0, codes 0). q [m, k] 16-byte aligned rows (k % 16 == 0).
cudaError_t launch_quantize_rows_fp8(const bf16* x, int m, int k, uint8_t* q, float* scale, cudaStream_t stream);

// The scales of an FP8 W8A8 GEMM computed without them (Gemm::run_fp8's kTensorScaled path: cuBLASLt's unscaled
// E4M3 x E4M3 product d): y[i, j] = bf16(row_scale[i] * col_scale[j] * d[i, j] + bias[j]), arithmetic in fp32.
// d and y [m, n] bf16 and may be the same buffer (in place); row_scale [m] (per token), col_scale [n] (per
// channel) fp32; bias [n] bf16 or null. 16 bytes per thread when n % 8 == 0 and d, y are 16-byte aligned.
cudaError_t launch_fp8_scale_epilogue(const bf16* d, const float* row_scale, const float* col_scale,
                                      const bf16* bias, bf16* y, int m, int n, cudaStream_t stream);

// Quantizes bf16 weights w [n, k] into a device layout (benchmarks: random weights in a format without a file):
// kFp8 as launch_quantize_rows_fp8 (params = row scales [n]); kInt8 symmetric with codes in [-qmax, qmax] and
// params = one scale per group of group_size inputs ([n, k / group_size]) or per row (group_size 0); kNib4
// affine per group (params [n, k / group_size, 2], codes 0..15; group_size a multiple of 32).
cudaError_t launch_quantize_weights(const bf16* w, int n, int k, WeightFormat fmt, int group_size, int qmax,
                                    uint8_t* codes, float* params, cudaStream_t stream);

// ---- skinny GEMM ----------------------------------------------------------------------------------------

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for m <= 8: one pass over the weights (bandwidth bound).
// k must be a multiple of 8 and the pointers 16-byte aligned. The weights are bf16 (w) or quantized (qw); the
// activations and the arithmetic are the same for every format (fp32 accumulation; the activations are not
// quantized, also with FP8 weights: the prologues produce them inside the kernel), except in the a8 variants
// of kInt8 and kNib4 (below), which quantize them to 8 bits as the CPU backend does for Q8_0 and Q4_0.
//
// Fused decode variants (compile-time prologue / epilogue of the same kernel; the prologue's operand stays in
// fp32 where the unfused kernels round their outputs to bf16). r = x_rows ? x_rows[i] : i:
//   prologue kRmsNorm: x[i, :] = x_f32[r, :] * rstd(x_f32[r, :]) * norm_w — replaces launch_rmsnorm (the
//                      sum of squares comes from the same loads, see gemm_skinny.cu);
//   prologue kSwiGlu:  x[i, j] = silu(x[r, j]) * x[r, k + j], x being gate|up [rows, 2k] bf16
//                      — replaces launch_swiglu;
//   epilogue kAddResidual: y is the fp32 residual [m, n] and y[i, n] += acc (fp32, no bf16 rounding, no bias).
// Supported pairs: (kNone, kStore), (kNone, kAddResidual), (kRmsNorm, kStore), (kSwiGlu, kAddResidual).
enum class SkinnyPrologue : int { kNone = 0, kRmsNorm = 1, kSwiGlu = 2 };
enum class SkinnyEpilogue : int { kStore = 0, kAddResidual = 1 };
struct SkinnyGemmParams {
  const bf16* x = nullptr;     // [m, k] (kNone; row r = x_rows[i] with x_rows), [rows, 2k] gate|up (kSwiGlu)
  const bf16* w = nullptr;     // [n, k]
  const bf16* bias = nullptr;  // [n] or null (kStore only)
  void* y = nullptr;           // [m, n] bf16, or fp32 when y_f32 (kAddResidual: fp32 residual, y_f32 ignored)
  bool y_f32 = false;
  int m = 0, n = 0, k = 0;
  int variant = 0;             // tiling variant, 0 .. skinny_variants(format) - 1 (see gemm_skinny.cu)
  SkinnyPrologue prologue = SkinnyPrologue::kNone;
  SkinnyEpilogue epilogue = SkinnyEpilogue::kStore;
  const float* x_f32 = nullptr;      // kRmsNorm: [rows, k] fp32 residual stream (16-byte aligned)
  const bf16* norm_w = nullptr;      // kRmsNorm: [k]
  float norm_eps = 1e-5f;
  const int32_t* x_rows = nullptr;   // [m] input row of each output row, or null (identity)
  // Weight bytes (spread over the rows) asked into L2 before griddepcontrol.wait, beyond the first register loads:
  // worth it when the kernel before is latency-bound (DRAM otherwise idle); 0: none.
  uint32_t l2_prefetch_bytes = 0;
  // CUDA-core tilings only (variant < kSkinnyVariants): 0 = each CTA computes all m rows; 1 .. m: the rows are
  // split into slices of row_slice rows, one per blockIdx.y (gemm_skinny.cuh, "Row slices"; same bits per row).
  int row_slice = 0;
  // Quantized weights (qw.fmt != kFloat): used instead of w, dequantized in registers; k a multiple of
  // weight_chunk_elems(qw.fmt) and of qw.group_size.
  QuantWeightView qw;
};
inline constexpr int kSkinnyMaxRows = 8;
// bf16 weights: kSkinnyVariants CUDA-core tilings (gemm_skinny.cuh; the unfused GEMM's skinny candidates), then
// kMmaSkinnyVariants on the bf16 tensor cores (gemm_skinny_mma.cuh; the fused decode GEMMs time them all).
inline constexpr int kSkinnyVariants = 10;
inline constexpr int kMmaSkinnyVariants = 20;
// Quantized formats: kQuantSkinnyVariants CUDA-core tilings (gemm_skinny.cuh), then variants kQuantSkinnyVariants
// and up on the f16 tensor cores (gemm_skinny_mma.cuh; group parameters applied to the weights in f16, see there).
inline constexpr int kQuantSkinnyVariants = 10;
// Every format then has persistent twins of its last kPersistentSkinnyVariants tensor-core tilings (the XS ones,
// gemm_skinny_mma.cuh; the only twins that won a shape in bench_gpu_skinny, docs/cuda.md): variant
// kFirstPersistentTwin + i runs tiling kFirstTwinnedTiling + i at m = 1 as a persistent grid (PERS: as many CTAs as
// the GPU holds at once, each streaming several tiles) and at m > 1 as the plain grid; the same bits either way.
inline constexpr int kPersistentSkinnyVariants = 4;
inline constexpr int kFirstPersistentTwin = kQuantSkinnyVariants + kMmaSkinnyVariants;                 // v30
inline constexpr int kFirstTwinnedTiling = kFirstPersistentTwin - kPersistentSkinnyVariants;           // v26
static_assert(kSkinnyVariants == kQuantSkinnyVariants, "bf16 and the quantized formats number alike");
// Tilings every format has: the CUDA-core ones + kMmaSkinnyVariants + the persistent twins.
inline constexpr int kCommonSkinnyVariants = kSkinnyVariants + kMmaSkinnyVariants + kPersistentSkinnyVariants;
// kInt8 and kNib4 then have kA8SkinnyVariants on the integer tensor cores (gemm_skinny_a8.h: activations
// quantized to 8 bits per group of 32 as the CPU backend's Q8_0 activations; weights that a8_supports: int8 groups
// of 32 without offset (Q8_0, Q5_0) and 4-bit groups (Q4_0, Q4_K, AWQ); the others refuse with
// cudaErrorNotSupported): variant kFirstA8Variant + i runs launch_skinny_a8's tiling i.
inline constexpr int kA8SkinnyVariants = 16;
inline constexpr int kFirstA8Variant = kCommonSkinnyVariants;                                      // v34
inline constexpr int kMaxSkinnyVariants = kCommonSkinnyVariants + kA8SkinnyVariants;
constexpr bool is_persistent_twin(int v) { return v >= kFirstPersistentTwin && v < kCommonSkinnyVariants; }
constexpr bool is_a8_variant(int v) { return v >= kFirstA8Variant && v < kMaxSkinnyVariants; }
// The tiling that variant v runs: its tiling for a persistent twin, else v.
constexpr int skinny_twin_tiling(int v) { return is_persistent_twin(v) ? v - kPersistentSkinnyVariants : v; }
// Variants of a weight format: kCommonSkinnyVariants, kMaxSkinnyVariants for kInt8 and kNib4.
int skinny_variants(WeightFormat f);
// The order in which a variant of format f sums each output's k products, as a number: variants with equal
// numbers give every output row the same bits whatever the row count m (a lane sums its chunks in ascending
// order, the lanes by shuffles, the warps sharing a row in warp order: only the warps per row group, KW, decide;
// rows per group, unroll, pipelining and m do not). Tensor-core variants: 100 + the variant (only themselves:
// their rows' activations and sums of squares are computed as at m = 1, gemm_skinny_mma.cuh); a8 variants:
// 200 + the warps splitting k (gemm_skinny_a8.h).
int skinny_reduction_order(WeightFormat f, int variant);
cudaError_t launch_skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream);

}  // namespace mopt::cuda
