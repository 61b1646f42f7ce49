#include "backend/cpu/cpu_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/quant.h"
#include "backend/communicator.h"
#include "backend/rope.h"
#include "core/argmax.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace mopt {
namespace {

// Reserves `bytes` (rounded up to whole huge pages) at a 2 MiB boundary, asking for transparent huge pages: 4 KiB
// pages would cost a page fault per 4 KiB of new context. With `populate`, the pages are faulted in now
// (MADV_POPULATE_WRITE, else one write per page) instead of on first use inside a step, where each new huge page
// stalls the step while the kernel zeroes it (figures: docs/cpu.md, "KV cache").
constexpr size_t kHugePage = 2u << 20;
Result<uint8_t*> map_anonymous(size_t& bytes, bool populate) {
  if (bytes == 0) return static_cast<uint8_t*>(nullptr);
  bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const size_t reserve = bytes + kHugePage;
  void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return error("cannot reserve %s for the KV cache: lower --kv-cache-memory", format_bytes(bytes).c_str());
  // Trim to the aligned [base, base + bytes) so that munmap(base, bytes) releases everything.
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (base > start) munmap(p, base - start);
  if (start + reserve > base + bytes) munmap(reinterpret_cast<void*>(base + bytes), start + reserve - (base + bytes));
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(base), bytes, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
  if (populate) {
    constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14); older kernels answer EINVAL
    if (madvise(reinterpret_cast<void*>(base), bytes, kPopulateWrite) != 0) {
      volatile uint8_t* q = reinterpret_cast<uint8_t*>(base);
      for (size_t off = 0; off < bytes; off += 4096) q[off] = 0;
    }
  }
  return reinterpret_cast<uint8_t*>(base);
}

// KV pools up to this size are faulted in when allocated (as vLLM and llama.cpp commit theirs); larger ones, e.g.
// a budget derived from --gpu-memory-utilization on a big machine, stay lazy.
constexpr size_t kPopulateLimit = size_t{4} << 30;

// fn(t) for every token t < T, over the pool in contiguous chunks when there is one and enough tokens.
template <class F>
void for_tokens(ThreadPool* pool, int T, const F& fn) {
  constexpr int kMinParallelTokens = 8;
  if (!pool || pool->size() <= 1 || T < kMinParallelTokens) {
    for (int t = 0; t < T; ++t) fn(t);
    return;
  }
  pool->parallel_for(T, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) fn(static_cast<int>(t));
  });
}

// Most bytes of the RoPE cos/sin table computed at load time (positions beyond it are computed per token).
constexpr int64_t kRopeTableBytes = 8 << 20;

// Tokens ahead whose K/V cache lines are prefetched (for writing) while a token's K/V are written: each write
// scatters a token over kv_dim lines of its block, which the last step read long ago (in L3 or memory).
constexpr int kSlotPrefetch = 2;

// Multiply-adds below which a forward pass runs on the calling thread alone: dispatching to other cores costs
// more than it saves (stories260K decodes one token in ~0.3M multiply-adds; 16 such tokens are worth splitting).
constexpr double kParallelMacs = 2e6;

// fp32 models whose matrices take at most this many bytes get packed copies for batched products (the copy
// doubles their weight memory; larger fp32 models keep the row-dot kernels).
constexpr double kPackMaxBytes = 256.0 * (1 << 20);

// Models whose matrices take at most this many bytes run batches as groups of whole sequences, one group per
// thread (every core reads all weights, so they must fit its cache). One group per thread: each group reads
// every weight once per step, and a long batch's KV cache streaming through the caches evicts the weights
// between groups, so more groups cost memory traffic (figures: docs/cpu.md). The groups' sizes follow the threads'
// speeds.
constexpr double kGroupMaxBytes = 4.0 * (1 << 20);
// Speed estimates: weight of the latest step in the moving average, and the smallest share a thread keeps
// relative to the fastest (so that a thread slowed once gets work again and is measured anew).
constexpr double kSpeedAlpha = 0.1;
constexpr double kMinSpeedRatio = 0.25;

const float* f32_data(const TensorView& t) { return static_cast<const float*>(t.data); }
cpu::PackSource pack_source(const TensorView& t) { return {f32_data(t), t.ne[1], t.ne[0]}; }

}  // namespace

Result<std::unique_ptr<CpuRunner>> CpuRunner::create(const Model& model, const RunnerOptions& opts,
                                                   const CpuShard* shard) {
  std::unique_ptr<CpuRunner> r(new CpuRunner());
  r->cfg_ = model.config;
  r->opts_ = opts;
  r->n_vocab_local_ = model.config.n_vocab;
  if (shard) {
    r->shard_ = *shard;
    r->cfg_.n_vocab = shard->n_vocab;
  }
  const ModelConfig& c = r->cfg_;
  if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 || c.n_ff <= 0 ||
      c.n_vocab <= 0 || c.n_head % c.n_head_kv != 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    return error("model config is not runnable (layers %d, embd %d, heads %d/%d, head_dim %d, rope_dim %d)",
                 c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.rope_dim);
  if (c.head_dim > cpu::kMaxTransposedHeadDim)
    return error("head_dim %d is above the CPU attention's limit of %d", c.head_dim, cpu::kMaxTransposedHeadDim);
  if (opts.kv_cache_dtype == KvCacheDtype::kFp8)
    return error("--kv-cache-dtype fp8 is a CUDA KV cache; the CPU backend's is fp16 (auto) or fp32: drop "
                 "--kv-cache-dtype fp8 or use --device cuda");
  r->kv_dtype_ = opts.kv_cache_dtype == KvCacheDtype::kFloat32 ? DType::F32 : DType::F16;  // kAuto: fp16
  r->kv_elem_bytes_ = r->kv_dtype_ == DType::F16 ? 2 : 4;
  r->pool_ = std::make_unique<ThreadPool>(opts.n_threads);
  MOPT_ASSIGN_OR_RETURN(r->tok_embd_, model.require("token_embd.weight"));
  r->output_ = model.find("output.weight");
  if (!r->output_) r->output_ = r->tok_embd_;
  for (const TensorView& t : model.tensors)  // weights multiplied per token (the embedding is only looked up)
    if (t.n_dims == 2 && t.name != "token_embd.weight") r->matrix_elems_ += static_cast<double>(t.n_elements());
  if (r->output_ == r->tok_embd_) r->matrix_elems_ += static_cast<double>(r->tok_embd_->n_elements());
  if (c.is_moe())  // the 2-D router and shared expert are counted above; of the experts, those a token uses
    r->matrix_elems_ += 3.0 * c.n_embd * c.n_ff_exp * c.n_expert_used * (c.n_layer - c.n_layer_dense_lead);
  MOPT_ASSIGN_OR_RETURN(const TensorView* on, model.require("output_norm.weight"));
  MOPT_TRY(cpu::tensor_to_f32(*on, c.n_embd, r->out_norm_));
  r->inv_freq_ = rope_inv_freq(c);
  {  // cos / sin of the first positions' RoPE angles, computed once (fp64 sin/cos per token and step otherwise)
    const int half = c.rope_dim / 2;
    const int64_t n_pos = half > 0 ? std::clamp<int64_t>(c.context_length, 0, kRopeTableBytes / (8 * half)) : 0;
    r->rope_cos_.resize(static_cast<size_t>(n_pos) * half);
    r->rope_sin_.resize(r->rope_cos_.size());
    for (int p = 0; p < n_pos; ++p)
      cpu::rope_table(p, r->inv_freq_.data(), half, r->rope_cos_.data() + static_cast<size_t>(p) * half,
                      r->rope_sin_.data() + static_cast<size_t>(p) * half);
  }
  r->layers_.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    Layer& L = r->layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    if (c.is_mla()) {
      if (shard) return error("multi-head latent attention (DeepSeek-V2) does not run tensor-parallel on the CPU");
      MOPT_ASSIGN_OR_RETURN(L.mla, cpu::mla_layer(model, l));
    } else {
      MOPT_ASSIGN_OR_RETURN(L.wq, model.require(p + "attn_q.weight"));
      MOPT_ASSIGN_OR_RETURN(L.wk, model.require(p + "attn_k.weight"));
      MOPT_ASSIGN_OR_RETURN(L.wv, model.require(p + "attn_v.weight"));
    }
    MOPT_ASSIGN_OR_RETURN(L.wo, model.require(p + "attn_output.weight"));
    if (c.is_moe_layer(l)) {
      MOPT_ASSIGN_OR_RETURN(L.moe, cpu::moe_layer(model, l));
    } else {
      MOPT_ASSIGN_OR_RETURN(L.w_gate, model.require(p + "ffn_gate.weight"));
      MOPT_ASSIGN_OR_RETURN(L.w_up, model.require(p + "ffn_up.weight"));
      MOPT_ASSIGN_OR_RETURN(L.w_down, model.require(p + "ffn_down.weight"));
    }
    MOPT_ASSIGN_OR_RETURN(const TensorView* an, model.require(p + "attn_norm.weight"));
    MOPT_ASSIGN_OR_RETURN(const TensorView* fn, model.require(p + "ffn_norm.weight"));
    MOPT_TRY(cpu::tensor_to_f32(*an, c.n_embd, L.attn_norm));
    MOPT_TRY(cpu::tensor_to_f32(*fn, c.n_embd, L.ffn_norm));
    if (c.qkv_bias) {
      MOPT_ASSIGN_OR_RETURN(const TensorView* bq, model.require(p + "attn_q.bias"));
      MOPT_ASSIGN_OR_RETURN(const TensorView* bk, model.require(p + "attn_k.bias"));
      MOPT_ASSIGN_OR_RETURN(const TensorView* bv, model.require(p + "attn_v.bias"));
      MOPT_TRY(cpu::tensor_to_f32(*bq, c.q_dim(), L.bq));
      MOPT_TRY(cpu::tensor_to_f32(*bk, c.kv_dim(), L.bk));
      MOPT_TRY(cpu::tensor_to_f32(*bv, c.kv_dim(), L.bv));
    }
    if (c.qk_norm) {
      MOPT_ASSIGN_OR_RETURN(const TensorView* qn, model.require(p + "attn_q_norm.weight"));
      MOPT_ASSIGN_OR_RETURN(const TensorView* kn, model.require(p + "attn_k_norm.weight"));
      MOPT_TRY(cpu::tensor_to_f32(*qn, c.head_dim, L.q_norm));
      MOPT_TRY(cpu::tensor_to_f32(*kn, c.head_dim, L.k_norm));
    }
  }
  // Every matrix in a type and row length that matmul takes: refused here, with the types it runs, not mid-step.
  auto check_matrix = [](const TensorView& w) -> Status {
    if (cpu::matmul_supports(w.dtype, w.ne[0])) return Status::ok();
    auto runs = [](const DTypeTraits& row) { return row.weight && cpu::dot_kernels(row.type) != nullptr; };
    return error("tensor '%s' is %s with rows of %lld elements, which the CPU backend does not multiply (it runs %s, "
                 "rows a multiple of the block size)",
                 w.name.c_str(), dtype_name(w.dtype), static_cast<long long>(w.ne[0]), dtype_list(runs).c_str());
  };
  MOPT_TRY(check_matrix(*r->output_));
  for (const Layer& L : r->layers_)
    for (const TensorView* w : {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down, L.mla.wq, L.mla.wq_a,
                                L.mla.wq_b, L.mla.wkv_a, L.mla.wkv_b})
      if (w) MOPT_TRY(check_matrix(*w));  // MoE layers: no dense MLP (cpu::moe_layer checked the experts)
  bool all_f32 = r->output_->dtype == DType::F32 && !c.is_moe();  // MoE models run the row-dot kernels
  for (const Layer& L : r->layers_)
    for (const TensorView* w : {L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down})
      all_f32 = all_f32 && w && w->dtype == DType::F32 && w->n_dims == 2;
  r->packed_ = all_f32 && r->matrix_elems_ * sizeof(float) <= kPackMaxBytes;
  if (r->packed_) {
    for (Layer& L : r->layers_) {
      const cpu::PackSource qkv[] = {pack_source(*L.wq), pack_source(*L.wk), pack_source(*L.wv)};
      const cpu::PackSource gu[] = {pack_source(*L.w_gate), pack_source(*L.w_up)};
      const cpu::PackSource o[] = {pack_source(*L.wo)};
      const cpu::PackSource down[] = {pack_source(*L.w_down)};
      if (qkv[0].N != c.q_dim() || qkv[1].N != c.kv_dim() || qkv[2].N != c.kv_dim() || gu[0].N != c.n_ff ||
          gu[1].N != c.n_ff || qkv[0].K != c.n_embd || qkv[1].K != c.n_embd || qkv[2].K != c.n_embd ||
          gu[0].K != c.n_embd || gu[1].K != c.n_embd)
        return error("layer matrices do not match the model config (q/k/v/gate/up shapes)");
      L.qkv = cpu::pack_f32(qkv);
      L.gate_up = cpu::pack_f32(gu);
      L.o = cpu::pack_f32(o);
      L.down = cpu::pack_f32(down);
    }
    const cpu::PackSource out[] = {pack_source(*r->output_)};
    r->output_packed_ = cpu::pack_f32(out);
  } else if (opts.cpu_repack) {  // Q4_0 / Q8_0 matrices into interleaved groups, fused where the parts share a type
    auto pack_q = [](std::initializer_list<const TensorView*> parts) {  // a null part (MoE: no dense MLP): none
      for (const TensorView* w : parts)
        if (!w) return cpu::PackedQ{};
      const DType t = (*parts.begin())->dtype;
      std::vector<cpu::PackQSource> src;
      for (const TensorView* w : parts) {
        if (w->dtype != t || w->n_dims != 2 || !cpu::pack_q_supports(t, w->ne[0])) return cpu::PackedQ{};
        src.push_back({w->data, w->ne[1], w->ne[0]});
      }
      return cpu::pack_q(t, src);
    };
    for (Layer& L : r->layers_) {
      L.qkv_q = pack_q({L.wq, L.wk, L.wv});
      L.gate_up_q = pack_q({L.w_gate, L.w_up});
      L.o_q = pack_q({L.wo});
      L.down_q = pack_q({L.w_down});
    }
    r->output_q_ = pack_q({r->output_});
  }
  r->fused_ = r->packed_;
  for (const Layer& L : r->layers_) r->fused_ = r->fused_ || L.fused_qkv() || L.fused_gate_up();
  r->work_.resize(static_cast<size_t>(std::max(1, r->pool_->size())));
  r->ensure_scratch(r->work_[0], std::max(1, opts.max_batch_tokens), std::max(1, opts.max_seqs));
  return r;
}

CpuRunner::~CpuRunner() {
  if (kv_) munmap(kv_, kv_bytes_);
  if (swap_) munmap(swap_, swap_bytes_);
}

uint64_t CpuRunner::kv_block_bytes(int block_size) const {
  return cfg_.kv_bytes_per_token(static_cast<int>(kv_elem_bytes_)) * static_cast<uint64_t>(block_size);
}

uint64_t CpuRunner::available_kv_memory(double memory_utilization) const {
  // The CPU "device memory" is the RAM the kernel reports as available now.
  uint64_t avail_kib = 0;
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t val;
  std::string unit;
  while (f >> key >> val >> unit)
    if (key == "MemAvailable:") avail_kib = val;
  if (avail_kib == 0) avail_kib = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / 1024;
  return static_cast<uint64_t>(static_cast<double>(avail_kib) * 1024.0 * std::clamp(memory_utilization, 0.0, 1.0));
}

Status CpuRunner::init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) {
  if (kv_) return error("KV cache already initialized");
  if (n_blocks <= 0 || block_size <= 0 || n_swap_blocks < 0)
    return error("invalid KV cache size: %d blocks of %d tokens (%d swap blocks)", n_blocks, block_size, n_swap_blocks);
  n_blocks_ = n_blocks;
  n_swap_blocks_ = n_swap_blocks;
  block_size_ = block_size;
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
  layer_elems_ = static_cast<size_t>(n_blocks) * block_size * kvd;
  swap_layer_elems_ = static_cast<size_t>(n_swap_blocks) * block_size * kvd;
  kv_bytes_ = 2 * static_cast<size_t>(cfg_.n_layer) * layer_elems_ * kv_elem_bytes_;
  swap_bytes_ = 2 * static_cast<size_t>(cfg_.n_layer) * swap_layer_elems_ * kv_elem_bytes_;
  MOPT_ASSIGN_OR_RETURN(kv_, map_anonymous(kv_bytes_, kv_bytes_ <= kPopulateLimit));
  MOPT_ASSIGN_OR_RETURN(swap_, map_anonymous(swap_bytes_, false));  // touched only by swapping
  return Status::ok();
}

void CpuRunner::ensure_scratch(Work& w, int n_tokens, int n_out) {
  if (n_tokens > w.cap_tokens) {
    w.cap_tokens = n_tokens;
    const size_t T = static_cast<size_t>(n_tokens);
    w.x.resize(T * cfg_.n_embd);
    w.xb.resize(T * cfg_.n_embd);
    w.q.resize(T * cfg_.q_dim());
    w.att.resize(T * cfg_.q_dim());
    w.k.resize(T * cfg_.kv_dim());
    w.v.resize(T * cfg_.kv_dim());
    w.gate.resize(T * cfg_.n_ff);
    w.up.resize(T * cfg_.n_ff);
    w.rope_cs.resize(T * static_cast<size_t>(cfg_.rope_dim / 2));
    w.rope_sn.resize(T * static_cast<size_t>(cfg_.rope_dim / 2));
    if (cfg_.is_moe()) w.moe_out.resize(T * cfg_.n_embd);
    if (fused_) {
      w.qkv.resize(T * (cfg_.q_dim() + 2 * cfg_.kv_dim()));
      w.gu.resize(T * 2 * cfg_.n_ff);
    }
  }
  if (n_out > w.cap_out) {
    w.cap_out = n_out;
    w.xo.resize(static_cast<size_t>(n_out) * cfg_.n_embd);
  }
}

Status CpuRunner::check_batch(const ForwardBatch& b) const {
  if (!kv_) return error("forward() before init_kv_cache()");
  BatchLimits lim;
  lim.n_vocab = cfg_.n_vocab;
  lim.n_blocks = n_blocks_;
  lim.block_size = block_size_;
  return validate_batch(b, lim);
}

Status CpuRunner::forward(const ForwardBatch& b, float* logits) {
  sampled_rows_ = -1;
  return forward_impl(b, logits, nullptr);
}

Status CpuRunner::forward_sample(const ForwardBatch& b, std::span<const RowSampling> params, int32_t* tokens) {
  sampled_rows_ = -1;
  if (!params.empty() && params.size() != static_cast<size_t>(b.n_out()))
    return error("forward_sample: %zu sampling settings for %d output rows", params.size(), b.n_out());
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].temperature > 0 && params[i].top_k != 1)
      return error("forward_sample: row %zu has temperature %g: the CPU runner picks greedy rows only (sample the "
                   "others from sampled_logits())", i, params[i].temperature);
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].allowed.empty())
      return error("forward_sample: row %zu has a token mask: the CPU runner does not apply masks (can_sample_masked() "
                   "is false; sample the row from sampled_logits())", i);
  sample_logits_.resize(static_cast<size_t>(b.n_out()) * cfg_.n_vocab);
  MOPT_TRY(forward_impl(b, sample_logits_.data(), tokens));
  sampled_rows_ = b.n_out();
  return Status::ok();
}

Status CpuRunner::sampled_logits(std::span<const int32_t> rows, float* logits) {
  if (sampled_rows_ < 0) return error("sampled_logits() without a successful forward_sample() before it");
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= sampled_rows_)
      return error("sampled_logits: row %d outside the %d rows of the last forward_sample()", rows[i], sampled_rows_);
    std::memcpy(logits + i * V, sample_logits_.data() + static_cast<size_t>(rows[i]) * V, V * sizeof(float));
  }
  return Status::ok();
}

Status CpuRunner::forward_impl(const ForwardBatch& b, float* logits, int32_t* tokens) {
  MOPT_TRY(check_batch(b));
  const int S = b.n_seqs();
  // Multiply-adds of each sequence's tokens (weights + attention over its context).
  std::vector<double>& cost = group_cost_;
  cost.assign(static_cast<size_t>(S) + 1, 0.0);  // prefix sums
  for (int s = 0; s < S; ++s) {
    const double nq = b.query_start[s + 1] - b.query_start[s];
    cost[s + 1] = cost[s] + nq * (matrix_elems_ + 2.0 * b.seq_lens[s] * cfg_.q_dim() * cfg_.n_layer);
  }
  // Small steps (single-stream decode of a tiny model) run on this thread alone; results are bit-identical.
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  auto pick_all = [&] {
    if (tokens)
      for (int i = 0; i < b.n_out(); ++i) tokens[i] = argmax_first(logits + i * V, cfg_.n_vocab);
  };
  if (cost[S] < kParallelMacs || pool_->size() <= 1) {
    run(b, work_[0], nullptr, logits);
    pick_all();
    return Status::ok();
  }
  // A model whose weights stay in each core's cache: groups of whole sequences run the entire forward pass on
  // one thread each (one pool job per step instead of ~10 per layer). Otherwise every kernel uses the pool.
  // A shard runs one forward pass per step (its collectives pair with the other shards' calls).
  if (matrix_elems_ * sizeof(float) > kGroupMaxBytes || S < 2 || shard_) {
    run(b, work_[0], pool_.get(), logits);
    pick_all();
    return Status::ok();
  }
  // Thread i runs group i, whose share of the step's cost follows the speed thread i showed in earlier steps
  // (cost per second from the dispatch to the end of its group). The cores of a shared machine are not equally
  // fast (another tenant on one of them): with equal shares, stories260K's 64-sequence steps waited 20-25% of
  // their time on the slower core. Outputs do not depend on the split (batch invariance).
  const int n_groups = std::min(S, pool_->size());
  thread_speed_.resize(static_cast<size_t>(pool_->size()), 0.0);
  double fast = 0;
  for (int g = 0; g < n_groups; ++g) fast = std::max(fast, thread_speed_[static_cast<size_t>(g)]);
  std::vector<double>& share = group_share_;  // [n_groups + 1] prefix sums of the threads' relative speeds
  share.assign(1, 0.0);
  for (int g = 0; g < n_groups; ++g) {  // unmeasured threads count as fast; none below kMinSpeedRatio of it
    const double v = thread_speed_[static_cast<size_t>(g)];
    share.push_back(share.back() + (fast > 0 && v > 0 ? std::max(v / fast, kMinSpeedRatio) : 1.0));
  }
  bounds_.assign(1, 0);  // contiguous groups of whole sequences, cost in proportion to the shares
  for (int g = 1; g < n_groups; ++g) {
    const double target = cost[S] * share[g] / share[n_groups];
    int s = bounds_.back() + 1;
    while (s < S - (n_groups - g) && cost[s] < target) ++s;
    bounds_.push_back(s);
  }
  bounds_.push_back(S);
  group_seconds_.assign(static_cast<size_t>(n_groups), 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  pool_->run_on_each([&](int64_t, int64_t, int tid) {
    if (tid >= n_groups) return;
    run_group(b, bounds_[tid], bounds_[tid + 1], work_[static_cast<size_t>(tid)], logits, tokens);
    group_seconds_[static_cast<size_t>(tid)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int g = 0; g < n_groups; ++g) {  // exponential moving average of each thread's speed
    const double sec = group_seconds_[static_cast<size_t>(g)], c = cost[bounds_[g + 1]] - cost[bounds_[g]];
    if (sec <= 0 || c <= 0) continue;
    double& v = thread_speed_[static_cast<size_t>(g)];
    v = v > 0 ? (1 - kSpeedAlpha) * v + kSpeedAlpha * (c / sec) : c / sec;
  }
  return Status::ok();
}

void CpuRunner::run_group(const ForwardBatch& b, int s0, int s1, Work& w, float* logits, int32_t* tokens) {
  const int t0 = b.query_start[s0], t1 = b.query_start[s1];
  w.query_start.resize(static_cast<size_t>(s1 - s0) + 1);
  for (int s = s0; s <= s1; ++s) w.query_start[s - s0] = b.query_start[s] - t0;
  w.logits_indices.clear();
  w.out_rows.clear();
  for (int i = 0; i < b.n_out(); ++i)
    if (b.logits_indices[i] >= t0 && b.logits_indices[i] < t1) {
      w.logits_indices.push_back(b.logits_indices[i] - t0);
      w.out_rows.push_back(i);
    }
  ForwardBatch g;
  g.tokens = b.tokens.subspan(t0, t1 - t0);
  g.positions = b.positions.subspan(t0, t1 - t0);
  g.slot_mapping = b.slot_mapping.subspan(t0, t1 - t0);
  g.query_start = w.query_start;
  g.seq_lens = b.seq_lens.subspan(s0, s1 - s0);
  g.max_blocks_per_seq = b.max_blocks_per_seq;
  g.block_tables = b.block_tables.subspan(static_cast<size_t>(s0) * b.max_blocks_per_seq,
                                          static_cast<size_t>(s1 - s0) * b.max_blocks_per_seq);
  g.logits_indices = w.logits_indices;
  const int n = g.n_out();
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  const bool contiguous = n == 0 || w.out_rows.back() - w.out_rows.front() == n - 1;
  if (contiguous) {
    run(g, w, nullptr, n > 0 ? logits + static_cast<size_t>(w.out_rows.front()) * V : logits);
  } else {
    w.logits.resize(static_cast<size_t>(n) * V);
    run(g, w, nullptr, w.logits.data());
    for (int i = 0; i < n; ++i)
      std::memcpy(logits + static_cast<size_t>(w.out_rows[i]) * V, w.logits.data() + static_cast<size_t>(i) * V,
                  V * sizeof(float));
  }
  if (tokens)  // while this core still holds the rows in its cache
    for (int row : w.out_rows) tokens[row] = argmax_first(logits + static_cast<size_t>(row) * V, cfg_.n_vocab);
}

void CpuRunner::run(const ForwardBatch& b, Work& w, ThreadPool* pool, float* logits) {
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens(), n_out = b.n_out();
  const int d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  ensure_scratch(w, T, n_out);
  float* x = w.x.data();    // [T, d] residual stream
  float* xb = w.xb.data();  // [T, d]

  // Per-token work between the matrix products runs over the pool in token chunks (it is the same code per token
  // either way). Embedding row, RoPE angles (one table per token for all heads and layers), first norm.
  const int half = c.rope_dim / 2;
  const uint64_t erb = *row_bytes(tok_embd_->dtype, static_cast<uint64_t>(d));
  for_tokens(pool, T, [&](int t) {
    float* xt = x + static_cast<size_t>(t) * d;
    const int64_t row = b.tokens[t] - (shard_ ? shard_->vocab_begin : 0);  // a shard's rows: the rest is 0
    if (row >= 0 && row < n_vocab_local_)
      cpu::dequantize_row(tok_embd_->dtype, static_cast<const uint8_t*>(tok_embd_->data) + erb * row, xt, d);
    else
      std::fill(xt, xt + d, 0.0f);
    float* cs = w.rope_cs.data() + static_cast<size_t>(t) * half;
    float* sn = w.rope_sn.data() + static_cast<size_t>(t) * half;
    const size_t at = static_cast<size_t>(b.positions[t]) * half;  // the position's row of the table
    if (at < rope_cos_.size()) {
      std::memcpy(cs, rope_cos_.data() + at, sizeof(float) * half);
      std::memcpy(sn, rope_sin_.data() + at, sizeof(float) * half);
    } else {
      cpu::rope_table(b.positions[t], inv_freq_.data(), half, cs, sn);
    }
    if (!shard_) cpu::rmsnorm(xb + static_cast<size_t>(t) * d, xt, layers_[0].attn_norm.data(), d, c.norm_eps);
  });
  if (shard_) {  // vocab-parallel embedding: each token's row came from one shard, zeros from the others
    reduce(x, T);
    for_tokens(pool, T, [&](int t) {
      cpu::rmsnorm(xb + static_cast<size_t>(t) * d, x + static_cast<size_t>(t) * d, layers_[0].attn_norm.data(), d,
                   c.norm_eps);
    });
  }

  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    const int qkv_w = qd + 2 * kvd;  // row width of the fused Q/K/V product
    if (c.is_mla()) {  // q, k, v with RoPE applied (cpu/mla.h)
      cpu::mla_qkv(c, L.mla, xb, T, w.rope_cs.data(), w.rope_sn.data(), w.q.data(), w.k.data(), w.v.data(), w.mla,
                   pool);
    } else if (packed_) {  // one pass for Q, K and V: rows [q | k | v], split below
      cpu::matmul_packed(L.qkv, xb, T, w.qkv.data(), pool);
    } else if (L.fused_qkv()) {
      cpu::matmul_q(L.qkv_q, xb, T, w.qkv.data(), pool);
    } else {
      cpu::matmul(*L.wq, xb, T, w.q.data(), pool);
      cpu::matmul(*L.wk, xb, T, w.k.data(), pool);
      cpu::matmul(*L.wv, xb, T, w.v.data(), pool);
    }
    uint8_t* kl = k_layer(l);
    uint8_t* vl = v_layer(l);
    for_tokens(pool, T, [&](int t) {
      if (t + kSlotPrefetch < T) prefetch_slot(kl, vl, static_cast<size_t>(b.slot_mapping[t + kSlotPrefetch]));
      float* qt = w.q.data() + static_cast<size_t>(t) * qd;
      float* kt = w.k.data() + static_cast<size_t>(t) * kvd;
      float* vt = w.v.data() + static_cast<size_t>(t) * kvd;
      if (L.fused_qkv()) {
        const float* row = w.qkv.data() + static_cast<size_t>(t) * qkv_w;
        std::memcpy(qt, row, sizeof(float) * qd);
        std::memcpy(kt, row + qd, sizeof(float) * kvd);
        std::memcpy(vt, row + qd + kvd, sizeof(float) * kvd);
      }
      if (!L.bq.empty()) {
        cpu::add(qt, L.bq.data(), qd);
        cpu::add(kt, L.bk.data(), kvd);
        cpu::add(vt, L.bv.data(), kvd);
      }
      if (c.qk_norm) {
        for (int h = 0; h < c.n_head; ++h) cpu::rmsnorm(qt + h * hd, qt + h * hd, L.q_norm.data(), hd, c.norm_eps);
        for (int h = 0; h < c.n_head_kv; ++h) cpu::rmsnorm(kt + h * hd, kt + h * hd, L.k_norm.data(), hd, c.norm_eps);
      }
      const float* cs = w.rope_cs.data() + static_cast<size_t>(t) * half;
      const float* sn = w.rope_sn.data() + static_cast<size_t>(t) * half;
      if (!c.is_mla()) {  // MLA: rotated by mla_qkv
        cpu::rope_apply(qt, c.n_head, hd, c.rope_dim, cs, sn, c.rope_style);
        cpu::rope_apply(kt, c.n_head_kv, hd, c.rope_dim, cs, sn, c.rope_style);
      }
      // Write this token's K/V at its slot: block = slot / block_size, offset = slot % block_size.
      const size_t slot = static_cast<size_t>(b.slot_mapping[t]);
      store_transposed(kl, slot, kt);
      store_transposed(vl, slot, vt);
    });
    cpu::PagedAttnArgs a;
    a.q = w.q.data();
    a.out = w.att.data();
    a.k_cache = kl;
    a.v_cache = vl;
    a.n_head = c.n_head;
    a.n_head_kv = c.n_head_kv;
    a.head_dim = hd;
    a.block_size = block_size_;
    a.n_seqs = b.n_seqs();
    a.query_start = b.query_start.data();
    a.seq_lens = b.seq_lens.data();
    a.positions = b.positions.data();
    a.block_tables = b.block_tables.data();
    a.max_blocks_per_seq = b.max_blocks_per_seq;
    a.scale = c.attn_scale_mult / std::sqrt(static_cast<float>(hd));
    a.sliding_window = c.sliding_window;
    a.kv_dtype = kv_dtype_;
    a.k_transposed = a.v_transposed = true;
    cpu::paged_attention(a, pool);
    if (c.is_mla()) cpu::mla_compact(c, w.att.data(), T);  // [T, n_head, head_dim] -> [T, n_head * v_head_dim]
    mm(*L.wo, L.o, L.o_q, w.att.data(), T, xb, pool);
    reduce(xb, T);  // row-parallel: each shard's heads' share of the output
    for_tokens(pool, T, [&](int t) {  // residual, then the FFN norm
      float* xt = x + static_cast<size_t>(t) * d;
      cpu::add(xt, xb + static_cast<size_t>(t) * d, d);
      cpu::rmsnorm(xb + static_cast<size_t>(t) * d, xt, L.ffn_norm.data(), d, c.norm_eps);
    });

    const float* ffn_out = xb;  // [T, d] the MLP's output
    if (c.is_moe_layer(l)) {
      cpu::moe_ffn(c, L.moe, xb, T, w.moe_out.data(), w.moe, pool);
      ffn_out = w.moe_out.data();
    } else {
      dense_mlp(L, w, T, pool);  // in place in xb
      reduce(xb, T);             // row-parallel down projection
    }
    const float* next_norm = l + 1 < c.n_layer ? layers_[static_cast<size_t>(l + 1)].attn_norm.data() : nullptr;
    for_tokens(pool, T, [&](int t) {  // residual, then the next layer's attention norm
      float* xt = x + static_cast<size_t>(t) * d;
      cpu::add(xt, ffn_out + static_cast<size_t>(t) * d, d);
      if (next_norm) cpu::rmsnorm(xb + static_cast<size_t>(t) * d, xt, next_norm, d, c.norm_eps);
    });
  }
  // Final norm and classifier only for the rows whose logits are wanted.
  for (int i = 0; i < n_out; ++i)
    cpu::rmsnorm(w.xo.data() + static_cast<size_t>(i) * d, x + static_cast<size_t>(b.logits_indices[i]) * d,
                 out_norm_.data(), d, c.norm_eps);
  if (n_out == 0) return;
  if (!shard_) {
    mm(*output_, output_packed_, output_q_, w.xo.data(), n_out, logits, pool);
    return;
  }
  // Vocab-parallel classifier: this shard's rows, gathered rank-major, then interleaved into [n_out, n_vocab].
  const size_t Vl = static_cast<size_t>(n_vocab_local_), V = static_cast<size_t>(c.n_vocab);
  w.logits_part.resize(static_cast<size_t>(n_out) * Vl);
  w.logits_gather.resize(static_cast<size_t>(n_out) * V);
  w.gather_counts.clear();
  for (size_t rows : shard_->vocab_counts) w.gather_counts.push_back(static_cast<size_t>(n_out) * rows);
  mm(*output_, output_packed_, output_q_, w.xo.data(), n_out, w.logits_part.data(), pool);
  shard_->comm->all_gather(w.logits_part.data(), w.gather_counts, w.logits_gather.data());
  const float* part = w.logits_gather.data();
  size_t col = 0;
  for (size_t rows : shard_->vocab_counts) {
    for (int i = 0; i < n_out; ++i)
      std::memcpy(logits + static_cast<size_t>(i) * V + col, part + static_cast<size_t>(i) * rows,
                  rows * sizeof(float));
    part += static_cast<size_t>(n_out) * rows;
    col += rows;
  }
}

void CpuRunner::reduce(float* y, int T) {
  if (shard_) shard_->comm->all_reduce_sum(y, static_cast<size_t>(T) * static_cast<size_t>(cfg_.n_embd));
}

void CpuRunner::dense_mlp(const Layer& L, Work& w, int T, ThreadPool* pool) {
  const int ff = cfg_.n_ff;
  float* xb = w.xb.data();
  if (packed_) {
    cpu::matmul_packed(L.gate_up, xb, T, w.gu.data(), pool);  // rows [gate | up]
  } else if (L.fused_gate_up()) {
    cpu::matmul_q(L.gate_up_q, xb, T, w.gu.data(), pool);
  } else {
    cpu::matmul(*L.w_gate, xb, T, w.gate.data(), pool);
    cpu::matmul(*L.w_up, xb, T, w.up.data(), pool);
  }
  for_tokens(pool, T, [&](int t) {  // gate_[t] = silu(gate) * up, one call per token (same path whatever T)
    float* g = w.gate.data() + static_cast<size_t>(t) * ff;
    if (L.fused_gate_up()) {
      const float* row = w.gu.data() + static_cast<size_t>(t) * 2 * ff;
      cpu::swiglu(g, row, row + ff, ff);
    } else {
      cpu::swiglu(g, g, w.up.data() + static_cast<size_t>(t) * ff, ff);
    }
  });
  mm(*L.w_down, L.down, L.down_q, w.gate.data(), T, xb, pool);
}

void CpuRunner::mm(const TensorView& w, const cpu::PackedF32& packed, const cpu::PackedQ& packed_q, const float* x,
                   int T, float* y, ThreadPool* pool) {
  if (packed_) {
    cpu::matmul_packed(packed, x, T, y, pool);
  } else if (!packed_q.empty()) {
    cpu::matmul_q(packed_q, x, T, y, pool);
  } else {
    cpu::matmul(w, x, T, y, pool);
  }
}

std::vector<std::span<const uint8_t>> CpuRunner::decode_weight_spans() const {
  std::vector<std::span<const uint8_t>> s;
  auto view = [&](const TensorView* v) { s.emplace_back(static_cast<const uint8_t*>(v->data), v->nbytes); };
  auto packed = [&](const cpu::PackedF32& p) {
    s.emplace_back(reinterpret_cast<const uint8_t*>(p.data.data()), p.data.size() * sizeof(float));
  };
  auto repacked = [&](const cpu::PackedQ& p) { s.emplace_back(p.data.get(), p.bytes()); };
  auto one = [&](const TensorView* v, const cpu::PackedF32& p, const cpu::PackedQ& q) {  // as mm() picks
    if (packed_) {
      packed(p);
    } else if (!q.empty()) {
      repacked(q);
    } else {
      view(v);
    }
  };
  if (cfg_.is_mla()) return {};
  for (const Layer& L : layers_) {  // as forward_impl and dense_mlp read them
    if (!L.w_gate) return {};
    if (packed_) {
      packed(L.qkv);
    } else if (L.fused_qkv()) {
      repacked(L.qkv_q);
    } else {
      for (const TensorView* v : {L.wq, L.wk, L.wv}) view(v);
    }
    one(L.wo, L.o, L.o_q);
    if (packed_) {
      packed(L.gate_up);
    } else if (L.fused_gate_up()) {
      repacked(L.gate_up_q);
    } else {
      for (const TensorView* v : {L.w_gate, L.w_up}) view(v);
    }
    one(L.w_down, L.down, L.down_q);
  }
  one(output_, output_packed_, output_q_);
  return s;
}

void CpuRunner::prefetch_slot(const uint8_t* kl, const uint8_t* vl, size_t slot) const {
  const size_t hd = static_cast<size_t>(cfg_.head_dim);
  const size_t stride = static_cast<size_t>(cpu::transposed_tile(block_size_)) * kv_elem_bytes_;  // between dims
  const size_t head = hd * static_cast<size_t>(block_size_) * kv_elem_bytes_;  // between heads
  const size_t base = slot_element(slot) * kv_elem_bytes_;
  for (int h = 0; h < cfg_.n_head_kv; ++h)
    for (size_t off = base + h * head, end = off + hd * stride; off < end; off += std::max<size_t>(stride, 64)) {
      __builtin_prefetch(kl + off, 1);
      __builtin_prefetch(vl + off, 1);
    }
}

void CpuRunner::store_transposed(uint8_t* layer, size_t slot, const float* k) const {
  const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), hd = static_cast<size_t>(cfg_.head_dim);
  const size_t head = hd * static_cast<size_t>(block_size_), W = static_cast<size_t>(cpu::transposed_tile(block_size_));
  const size_t base = slot_element(slot);  // element h * hd + d at base + h * head + d * W
  size_t at = 0, d = 0;                    // of the next element: its offset from base, its dim
  auto put = [&](auto* dst, auto value) {
    dst[at] = value;
    if (++d == hd) d = 0, at += head - (hd - 1) * W;
    else at += W;
  };
  if (kv_dtype_ == DType::F16) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(layer) + base;
    uint16_t h[64];  // converted 64 at a time (vectorized), then scattered
    for (size_t e0 = 0; e0 < kvd; e0 += 64) {
      const size_t m = std::min<size_t>(64, kvd - e0);
      cpu::fp32_to_fp16_row(k + e0, h, static_cast<int64_t>(m));
      for (size_t e = 0; e < m; ++e) put(dst, h[e]);
    }
  } else {
    float* dst = reinterpret_cast<float*>(layer) + base;
    for (size_t e = 0; e < kvd; ++e) put(dst, k[e]);
  }
}

Status CpuRunner::copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool to_swap, const char* what) {
  const size_t eb = kv_elem_bytes_;
  const size_t blk = static_cast<size_t>(block_size_) * cfg_.kv_dim() * eb;  // bytes of one block of one layer
  for (auto [first, second] : pairs) {
    const int dev = to_swap ? first : second, host = to_swap ? second : first;
    if (dev < 0 || dev >= n_blocks_ || host < 0 || host >= n_swap_blocks_)
      return error("%s: block pair (%d, %d) out of range", what, first, second);
    for (size_t lk = 0; lk < 2 * static_cast<size_t>(cfg_.n_layer); ++lk) {
      uint8_t* pool = kv_ + lk * layer_elems_ * eb + dev * blk;
      uint8_t* swap = swap_ + lk * swap_layer_elems_ * eb + host * blk;
      std::memcpy(to_swap ? swap : pool, to_swap ? pool : swap, blk);
    }
  }
  return Status::ok();
}

Status CpuRunner::swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) {
  return copy_blocks(device_to_host, true, "swap_out");
}

Status CpuRunner::swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) {
  return copy_blocks(host_to_device, false, "swap_in");
}

}  // namespace mopt
