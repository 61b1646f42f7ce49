// CudaRunner's step plan (runner_impl.h), decided on the host before anything is enqueued: the batch's range
// checks, its StepShape (attention kernel and split count, fused or general path, CUDA graph bucket), and the
// staging of its int metadata into the pinned buffer with the H2D copies that bring it to the device.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {
namespace {

// Decode batch sizes for which CUDA graphs are captured (a batch is padded up to the next bucket).
constexpr int kGraphBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,  96,  128, 160, 192,
                                 224, 256, 288, 320, 352, 384, 416, 448, 480, 512};

}  // namespace

std::vector<int> CudaRunner::graph_buckets() const {
  std::vector<int> out;
  for (int bk : kGraphBuckets)
    if (bk <= opts_.max_seqs && bk <= max_tokens_) out.push_back(bk);
  return out;
}

void CudaRunner::plan_graph_attention(int rows, StepShape& s) const {
  const ModelConfig& c = cfg_;
  s.attn_hpc = rows * c.n_head_kv < n_sms_ ? 2 : 0;  // see plan_step
  const int ctas_per_token = c.n_head / decode_heads_per_cta(c.n_head / c.n_head_kv, s.attn_hpc);
  s.n_splits = std::min(kMaxSplits, choose_decode_splits(rows * ctas_per_token, bt_stride_ * block_size_, n_sms_));
}

Status CudaRunner::check_batch(const ForwardBatch& b) const {
  if (kv_.bytes() == 0) return error("forward() before init_kv_cache()");
  // Consecutive positions: the prefill tiles assume them.
  return validate_batch(b, {.n_vocab = full_vocab_ > 0 ? full_vocab_ : cfg_.n_vocab, .n_blocks = n_blocks_,
                            .block_size = block_size_, .max_tokens = max_tokens_, .max_seqs = opts_.max_seqs,
                            .max_context_blocks = bt_stride_, .consecutive_positions = true,
                            .unique_logits_indices = true});
}

// The step's shape. A decode batch (one token per sequence) whose logits are one row per sequence, in order,
// runs in the CUDA graph of the smallest bucket that holds it (padded to the bucket); a verification step (2 ..
// verify_max_rows_ rows, not a decode batch, every row's logits in order) in the verification graph of its row
// count (StepShape::verify); other batches run eagerly.
Status CudaRunner::plan_step(const ForwardBatch& b, StepShape& s) {
  const ModelConfig& c = cfg_;
  const int n = b.n_tokens(), S = b.n_seqs(), n_out = b.n_out();
  bool decode = n == S;  // every sequence brings exactly one token
  int max_len = 0;
  for (int q = 0; q < S; ++q) max_len = std::max(max_len, b.seq_lens[q]);

  s.n_seqs = S;
  s.n_out = std::min(n_out, logit_rows_);
  bool in_order = true;  // logits rows 0, 1, ...
  for (int i = 0; in_order && i < n_out; ++i) in_order = b.logits_indices[i] == i;
  // (profile_step plans it too, and run_step then runs it eagerly: a verification step has no other fused shape.)
  if (!decode && n <= verify_max_rows_ && n_out == n && in_order && !opts_.enforce_eager) {
    s.verify = true;
    s.graph_bucket = n;
    s.n_tokens = n;
    s.n_out = n;
    s.fused = true;
    plan_graph_attention(1, s);  // bucket 1's (fixed, as its graph's): the rows' attention as in decode
    return Status::ok();
  }
  // Decode attention: with fewer (token, KV head) pairs than SMs (a batch of one to a few sequences), a CTA
  // serves at most 2 query heads: each CTA's serial work, which bounds such a launch, shrinks (docs/cuda.md,
  // "Decode attention") and the duplicate K/V reads hit L2. Larger batches keep the whole GQA group per CTA (each
  // K/V row read once from memory).
  const int group = c.n_head / c.n_head_kv;
  s.attn_hpc = n * c.n_head_kv < n_sms_ ? 2 : 0;
  const int ctas_per_token = c.n_head / decode_heads_per_cta(group, s.attn_hpc);

  // CUDA graph for decode batches whose logits are exactly one row per sequence, in order.
  bool graph = decode && !opts_.enforce_eager && n_out == S && !profiling_ && in_order;
  int bucket = 0;
  if (graph) {
    for (int bk : kGraphBuckets)
      if (bk >= n && bk <= opts_.max_seqs && bk <= max_tokens_) {
        bucket = bk;
        break;
      }
    graph = bucket > 0;
  }
  if (graph) {
    const GraphEntry& g = graphs_[bucket];
    s.graph_bucket = bucket;
    s.n_tokens = bucket;
    s.n_out = bucket;
    s.fused = fused_decode_ && bucket <= kSkinnyMaxRows;
    // Fixed per bucket (the graph freezes it); sized for the longest context the block table allows.
    s.n_splits = g.exec ? g.n_splits
                        : std::min(kMaxSplits, choose_decode_splits(bucket * ctas_per_token,
                                                                    bt_stride_ * block_size_, n_sms_));
  } else {
    s.n_tokens = n;
    // fp32: the per-token kernel for prefill too (the tensor-core prefill kernel is bf16 only).
    if (decode || f32_ || !prefill_attention_supported(c.head_dim)) {
      s.use_prefill_kernel = false;
      s.fused = fused_decode_ && decode && n <= kSkinnyMaxRows;
      s.n_splits = n <= opts_.max_seqs
                       ? std::min(kMaxSplits, choose_decode_splits(n * ctas_per_token, max_len, n_sms_))
                       : 1;
    } else {
      s.use_prefill_kernel = true;
      for (int q = 0; q < S; ++q)
        s.n_tiles += (b.query_start[q + 1] - b.query_start[q] + kPrefillTileRows - 1) / kPrefillTileRows;
      if (s.n_tiles > max_tiles_) return error("internal: %d attention tiles > %d", s.n_tiles, max_tiles_);
    }
  }
  return Status::ok();
}

// Fills the pinned metadata buffer (padding the batch to pad_to tokens/sequences for graphs) and enqueues the
// H2D copies. Padding tokens have position -1 and slot -1: nothing is written for them and their attention is 0.
Status CudaRunner::stage_metadata(const ForwardBatch& b, const StepShape& s, int pad_to) {
  const int T = max_tokens_;
  const int n = b.n_tokens();
  int32_t* h = meta_host_.as<int32_t>();
  int32_t* tokens = h;
  int32_t* positions = h + T;
  int32_t* slots = h + 2 * T;
  int32_t* token_seq = h + 3 * T;
  int32_t* logit_rows = h + 4 * T;
  int32_t* tile_start = h + 5 * T;
  int32_t* tile_end = tile_start + max_tiles_;
  int32_t* tile_seq = tile_end + max_tiles_;
  int32_t* bt = tile_seq + max_tiles_;
  // A shard's embedding rows start at vocab_begin_; tokens outside them index no row and embed as zeros.
  for (int i = 0; i < n; ++i) tokens[i] = b.tokens[static_cast<size_t>(i)] - vocab_begin_;
  std::copy(b.positions.begin(), b.positions.end(), positions);
  std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), slots);
  for (int q = 0; q < b.n_seqs(); ++q)
    for (int i = b.query_start[q]; i < b.query_start[q + 1]; ++i) token_seq[i] = q;
  for (int i = n; i < pad_to; ++i) {
    tokens[i] = 0;
    positions[i] = -1;
    slots[i] = -1;
    token_seq[i] = 0;
  }
  const int n_logits = std::min(b.n_out(), logit_rows_);
  std::copy(b.logits_indices.begin(), b.logits_indices.begin() + n_logits, logit_rows);
  for (int i = b.n_out(); i < pad_to; ++i) logit_rows[i] = i;  // padding rows of a graph bucket
  int nt = 0;
  if (s.use_prefill_kernel) {
    for (int q = 0; q < b.n_seqs(); ++q)
      for (int i = b.query_start[q]; i < b.query_start[q + 1]; i += kPrefillTileRows) {
        tile_start[nt] = i;
        tile_end[nt] = std::min(b.query_start[q + 1], i + kPrefillTileRows);
        tile_seq[nt] = q;
        ++nt;
      }
    MOPT_CHECK(nt == s.n_tiles, "tile count %d != planned %d", nt, s.n_tiles);
  }
  int width = 0;
  for (int q = 0; q < b.n_seqs(); ++q) {
    const int need = (b.seq_lens[q] + block_size_ - 1) / block_size_;
    width = std::max(width, need);
    std::copy_n(b.block_tables.begin() + static_cast<size_t>(q) * b.max_blocks_per_seq, need,
                bt + static_cast<size_t>(q) * bt_stride_);
  }
  const size_t head_ints = static_cast<size_t>(5) * T + 3 * static_cast<size_t>(max_tiles_);
  MOPT_CUDA_TRY(cudaMemcpyAsync(meta_dev_.as<int32_t>(), h, head_ints * 4, cudaMemcpyHostToDevice, stream_));
  if (width > 0)
    MOPT_CUDA_TRY(cudaMemcpy2DAsync(d_block_tables_, static_cast<size_t>(bt_stride_) * 4, bt,
                                    static_cast<size_t>(bt_stride_) * 4, static_cast<size_t>(width) * 4, b.n_seqs(),
                                    cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

}  // namespace mopt::cuda
