// CudaRunner::warmup (runner_impl.h; docs/warmup.md): before the first request, every step shape that would
// otherwise tune GEMMs or capture a CUDA graph inside a request runs once here:
//   - each decode graph bucket up to max_seqs: an eager step (tunes the bucket's GEMMs), then a second step that
//     captures the graph (and, on the fused path, re-times the fused GEMMs' tilings inside it);
//   - each row count 1 .. autotune_max_m of the eagerly run general path (prefill chunks, mixed steps): GEMMs
//     with that many rows, and the output projection for as many logits rows, are timed on first use;
//   - above that, one step per GEMM row bucket up to the batch token limit: larger row counts take the cuBLASLt
//     algorithm of their bucket (gemm.h), so a long prompt finds its heuristic answered and its kernels loaded;
//   - with --enforce-eager, each decode batch of 1 .. kSkinnyMaxRows rows of the fused path;
//   - with speculative decoding (RunnerOptions::spec_tokens), each verification graph (StepShape::verify).
// Plans come from the plan cache (backend/plan_cache.h) when it holds them, and the cache is written afterwards.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

#include "backend/cuda/entry.h"
#include "backend/cuda/runner_impl.h"
#include "core/log.h"

namespace mopt::cuda {
namespace {

using Clock = std::chrono::steady_clock;
double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The backend's own build: size and modification time of the shared object holding this code (a rebuilt
// backend may have other kernels and variants, so its plans are not reused).
std::string backend_build_id() {
  Dl_info info{};
  struct stat st{};
  if (!dladdr(reinterpret_cast<const void*>(&mopt_cuda_backend_v1), &info) || !info.dli_fname ||
      stat(info.dli_fname, &st) != 0)
    return "unknown";
  return strfmt("%lld-%lld", static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtime));
}

// One warm-up step's batch.
struct WarmStep {
  BatchArrays arr;
  std::string what;
  bool graph = false;  // a decode bucket: run twice (eager, then capture)
};

}  // namespace

PlanCacheKey CudaRunner::plan_cache_key() const {
  const ModelConfig& c = cfg_;
  PlanCacheKey k;
  auto num = [](long long v) { return std::to_string(v); };
  k.model = {{"arch", num(static_cast<int>(c.arch))}, {"n_embd", num(c.n_embd)}, {"n_layer", num(c.n_layer)},
             {"n_head", num(c.n_head)}, {"n_head_kv", num(c.n_head_kv)}, {"head_dim", num(c.head_dim)},
             {"n_ff", num(c.n_ff)}, {"n_vocab", num(c.n_vocab)}, {"qkv_bias", num(c.qkv_bias)},
             {"dtype", f32_ ? "float32" : "bfloat16"}, {"max_seqs", num(opts_.max_seqs)},
             {"max_tokens", num(max_tokens_)}, {"fused_decode", num(fused_decode_)},
             {"l2_prefetch", num(l2_prefetch_o_) + "/" + num(l2_prefetch_other_)},
             {"refine_graph_plans", num(refine_graph_plans_)}, {"autotune_max_m", num(gemm_.autotune_max_m)}};
  if (!gemm_.persistent_twins) k.model.push_back({"persistent_gemms", "0"});
  if (!gemm_.int8_activations) k.model.push_back({"int8_activations", "0"});
  // Quantized layers: their layouts (a fused plan's key names the format, not the group size). bf16 models keep
  // their keys (and cache files).
  if (const std::string q = quantized_layouts(); !q.empty()) k.model.push_back({"quantized", q});
  if (gemm_.one_row_eps > 0.f)  // runners without it keep their keys (and cache files)
    k.model.push_back({"one_row_plan_eps", strfmt("%g", static_cast<double>(gemm_.one_row_eps))});
  if (c.is_moe())  // dense models keep their keys (and cache files)
    k.model.insert(k.model.end(), {{"n_expert", num(c.n_expert)}, {"n_expert_used", num(c.n_expert_used)},
                                   {"n_ff_exp", num(c.n_ff_exp)}, {"n_ff_shexp", num(c.n_ff_shexp)}});
  if (c.is_mla())
    k.model.insert(k.model.end(), {{"q_lora_rank", num(c.q_lora_rank)}, {"kv_lora_rank", num(c.kv_lora_rank)},
                                   {"qk_nope_dim", num(c.qk_nope_dim)}, {"v_head_dim", num(c.v_head_dim)},
                                   {"n_layer_dense_lead", num(c.n_layer_dense_lead)}});
  cudaDeviceProp prop{};
  int driver = 0, runtime = 0;
  cudaGetDeviceProperties(&prop, device_id_);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  k.platform = {{"gpu", prop.name}, {"compute_capability", strfmt("%d.%d", prop.major, prop.minor)},
                {"sms", num(prop.multiProcessorCount)}, {"driver", num(driver)}, {"cuda_runtime", num(runtime)},
                {"cublaslt", num(static_cast<long long>(cublasLtGetVersion()))}, {"backend", backend_build_id()}};
  return k;
}

std::string CudaRunner::quantized_layouts() const {
  std::set<std::string> seen;
  auto add = [&](const Linear& l) {
    if (l.qw.fmt != WeightFormat::kFloat)
      seen.insert(strfmt("%s/g%d%s", weight_format_name(l.qw.fmt), l.qw.group_size, l.qw.affine ? "/affine" : ""));
  };
  for_each_layer_linear(add);
  add(output_q_);
  std::string out;
  for (const std::string& s : seen) out += (out.empty() ? "" : ",") + s;
  return out;
}

// One warm-up step as a request would run it: sampled on the GPU, or (a tensor-parallel shard, whose logits
// are a slice of the vocabulary) with its greedy pick over its columns, as forward_argmax makes it.
Status CudaRunner::warm_step(const ForwardBatch& b, std::span<const GpuSampling> params, int32_t* tokens) {
  if (full_vocab_ == 0) return forward_sample(b, params, tokens);
  return sample_step(b, {}, tokens);
}

Result<WarmupReport> CudaRunner::warmup(const WarmupProgress& progress) {
  if (kv_.bytes() == 0) return error("warmup() before init_kv_cache()");
  WarmupReport rep;
  const uint64_t tuned0 = gemm_.n_tuned(), cached0 = gemm_.n_from_cache();

  // The plan cache: a hit makes the steps below take their plans instead of timing them.
  const PlanCacheKey key = plan_cache_key();
  std::string path;
  bool hit = false;
  if (!opts_.plan_cache) {
    rep.plan_cache = "off (--no-plan-cache)";
  } else {
    const std::string dir = opts_.plan_cache_dir.empty() ? default_plan_cache_dir() : opts_.plan_cache_dir;
    if (dir.empty()) {
      MOPT_LOG_WARN("plan cache: neither $XDG_CACHE_HOME nor $HOME is set; tuning without a plan cache "
                    "(give --plan-cache-dir)");
      rep.plan_cache = "off (no cache directory)";
    } else {
      path = dir + "/" + key.file_name();
      std::vector<PlanRecordSchema> schema = Gemm::plan_schema();
      schema.push_back({"graph", 1, 0});
      PlanCacheLoad loaded = load_plan_cache(path, key, schema);
      if (loaded.outcome == PlanCacheLoad::Outcome::kHit) {
        // "graph" records (buckets whose tilings were refined) are the runner's; the rest are the GEMMs'.
        std::vector<int> refined;
        std::vector<PlanRecord> gemm_records;
        for (PlanRecord& r : loaded.records) {
          if (r.kind == "graph") refined.push_back(static_cast<int>(r.ints[0]));
          else gemm_records.push_back(std::move(r));
        }
        Status st = gemm_.import_plans(gemm_records);
        if (st) {
          hit = true;
          for (int b : refined) graphs_[b].refined = true;  // its fused plans hold the refined tilings
          rep.plan_cache = "read " + path;
          MOPT_LOG_INFO("plan cache: %zu plans from %s", loaded.records.size(), path.c_str());
        } else {
          MOPT_LOG_WARN("plan cache %s: %s; tuning again (the file will be replaced)", path.c_str(),
                        st.message().c_str());
          rep.plan_cache = "rejected " + path;
        }
      } else if (loaded.outcome == PlanCacheLoad::Outcome::kRejected) {
        MOPT_LOG_WARN("plan cache %s: %s; tuning again (the file will be replaced)", path.c_str(),
                      loaded.reason.c_str());
        rep.plan_cache = "rejected " + path;
      } else {
        MOPT_LOG_INFO("plan cache: no plans yet for this model and these limits (%s); tuning", path.c_str());
        rep.plan_cache = "missing " + path;
      }
    }
  }

  // The steps. Sequence i of a decode batch writes slot i (mod the pool) at position i mod block_size, so no two
  // sequences write the same slot; its context is that slot's block up to it. Nothing a request owns yet is used.
  const int slots = n_blocks_ * block_size_;
  std::vector<WarmStep> steps;
  auto decode_step = [&](int n, bool all_rows, bool graph) {
    WarmStep w;
    w.graph = graph;
    w.what = strfmt(graph ? "decode graph, batch %d" : "eager decode, batch %d", n);
    BatchArrays& a = w.arr;
    a.max_blocks_per_seq = 1;
    for (int i = 0; i < n; ++i) {
      const int slot = i % slots;
      a.tokens.push_back(i % cfg_.n_vocab);
      a.positions.push_back(slot % block_size_);
      a.slot_mapping.push_back(slot);
      a.query_start.push_back(i + 1);
      a.seq_lens.push_back(slot % block_size_ + 1);
      a.block_tables.push_back(slot / block_size_);
      if (all_rows || i + 1 < n) a.logits_indices.push_back(i);  // one row short: not a graph step
    }
    steps.push_back(std::move(w));
  };
  if (!opts_.enforce_eager)
    for (int b : graph_buckets()) decode_step(b, true, true);
  if (fused_decode_)  // eager fused decode steps (with graphs: only those whose rows do not match a graph)
    for (int n = 1; n <= std::min(kSkinnyMaxRows, opts_.max_seqs); ++n) decode_step(n, opts_.enforce_eager, false);
  // One sequence of m prompt tokens, every position's logits (at most a chunk of logit_rows_). m = 1 is a decode
  // step: bucket 1's graph again, or under --enforce-eager the general path's m = 1 GEMMs (no fused path).
  // Above autotune_max_m, one step per row bucket (gemm_row_bucket): its cuBLASLt algorithms and their kernels.
  const int max_rows = std::min({max_tokens_, slots, bt_stride_ * block_size_});
  const int max_m = std::min(gemm_.autotune_max_m, max_rows);
  std::vector<int> row_counts;
  for (int m = 1; m <= max_m; ++m) row_counts.push_back(m);
  for (int m = max_m + 1; m <= max_rows; m = gemm_row_bucket(m) + 1)
    row_counts.push_back(std::min(gemm_row_bucket(m), max_rows));
  // verify: in order (a verification graph, run twice like a decode bucket); else, for m rows of a verification
  // graph, the rows in reverse order, so that the general path's m-row GEMMs (prompt chunks) are tuned too.
  auto one_sequence = [&](int m, bool verify) {
    WarmStep w;
    w.what = strfmt(verify ? "verification graph, %d tokens" : "eager step, %d tokens", m);
    w.graph = verify;
    BatchArrays& a = w.arr;
    const int blocks = (m + block_size_ - 1) / block_size_;
    a.max_blocks_per_seq = blocks;
    for (int i = 0; i < m; ++i) {
      a.tokens.push_back(i % cfg_.n_vocab);
      a.positions.push_back(i);
      a.slot_mapping.push_back(i);
      if (i < logit_rows_) a.logits_indices.push_back(i);
    }
    if (!verify && m <= verify_max_rows_) std::reverse(a.logits_indices.begin(), a.logits_indices.end());
    a.query_start.push_back(m);
    a.seq_lens.push_back(m);
    for (int b = 0; b < blocks; ++b) a.block_tables.push_back(b);
    steps.push_back(std::move(w));
  };
  for (int m : row_counts) one_sequence(m, false);
  // Verification graphs (StepShape::verify), after bucket 1's graph, whose refined plans they follow.
  if (!opts_.enforce_eager)
    for (int m = 2; m <= verify_max_rows_ && m <= max_rows; ++m) one_sequence(m, true);

  // A prompt's step asks for its last token's logits only: the general path's one-row lm_head GEMM, which the
  // all-rows steps above reach only at m = 1, where graphs (not the general path) run.
  if (!opts_.enforce_eager && max_m >= 2) {
    WarmStep w;
    w.what = "eager step, 2 tokens, last row's logits";
    BatchArrays& a = w.arr;
    const int blocks = (2 + block_size_ - 1) / block_size_;
    a.max_blocks_per_seq = blocks;
    a.tokens = {0, 1};
    a.positions = {0, 1};
    a.slot_mapping = {0, 1};
    a.logits_indices = {1};
    a.query_start = {0, 2};
    a.seq_lens = {2};
    for (int b = 0; b < blocks; ++b) a.block_tables.push_back(b);
    steps.push_back(std::move(w));
  }

  // Sampling settings: in graph steps the first row draws (top-k/top-p/min-p) and the others are greedy (the
  // sampling kernel); eager steps are all greedy (the argmax kernel). Both kernels have run before the first
  // request.
  std::vector<GpuSampling> params;
  std::vector<int32_t> tokens(static_cast<size_t>(std::max(logit_rows_, 1)));
  const int total = static_cast<int>(steps.size());
  for (int i = 0; i < total; ++i) {
    WarmStep& w = steps[static_cast<size_t>(i)];
    if (progress) progress(i, total, w.what);
    const ForwardBatch b = w.arr.view();
    params.assign(w.graph ? static_cast<size_t>(b.n_out()) : 0, GpuSampling{});
    if (!params.empty()) params[0] = GpuSampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                                 .seed = 1, .allowed = {}};
    const auto t0 = Clock::now();
    MOPT_TRY(warm_step(b, params, tokens.data()).with_context("warm-up: " + w.what));
    rep.tuning_s += secs_since(t0);
    ++rep.eager_shapes;
    if (w.graph) {
      const auto t1 = Clock::now();
      const uint64_t captured = captures_.load();
      MOPT_TRY(warm_step(b, params, tokens.data()).with_context("warm-up: capturing the " + w.what));
      rep.capture_s += secs_since(t1);
      rep.graphs += static_cast<int>(captures_.load() - captured);
    }
  }
  if (progress) progress(total, total, "done");
  rep.plans_tuned = gemm_.n_tuned() - tuned0;
  rep.plans_from_cache = gemm_.n_from_cache() - cached0;

  if (!path.empty() && (!hit || rep.plans_tuned > 0)) {
    std::vector<PlanRecord> records = gemm_.export_plans();
    for (const auto& [bucket, g] : graphs_)
      if (g.refined) records.push_back({"graph", {bucket}, {}});
    if (Status st = save_plan_cache(path, key, records); !st) {
      MOPT_LOG_WARN("plan cache: %s; the next start tunes again", st.message().c_str());
      rep.plan_cache += " (not written: " + st.message() + ")";
    } else {
      rep.plan_cache += strfmt("; wrote %zu plans", records.size());
    }
  }
  return rep;
}

}  // namespace mopt::cuda
