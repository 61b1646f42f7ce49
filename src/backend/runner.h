// ModelRunner: the one interface between the engine (scheduler, KV block manager, sampler) and a backend
// (CPU or CUDA). The engine builds a flat variable-length batch; the runner runs one forward pass over it,
// writing new K/V into the paged cache at the given slots and reading context through the block tables.
//
// Paged KV cache: n_blocks blocks of block_size token slots. Slot s = block_id * block_size + offset.
// Each backend owns the cache memory and its layout.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace mopt {

class Model;

// A flat batch of n_tokens tokens from n_seqs sequences (sequence i owns tokens
// [query_start[i], query_start[i+1])). Tokens of a sequence are consecutive positions.
struct ForwardBatch {
  std::span<const int32_t> tokens;        // [n_tokens]
  std::span<const int32_t> positions;     // [n_tokens] absolute position of each token
  std::span<const int32_t> slot_mapping;  // [n_tokens] KV slot each token's K/V is written to
  std::span<const int32_t> query_start;   // [n_seqs + 1] prefix offsets into tokens
  std::span<const int32_t> seq_lens;      // [n_seqs] context length after this step (cached + new tokens)
  std::span<const int32_t> block_tables;  // [n_seqs, max_blocks_per_seq] row-major, unused entries -1
  int max_blocks_per_seq = 0;
  std::span<const int32_t> logits_indices;  // [n_out] token indices (into tokens) whose logits are returned

  int n_tokens() const { return static_cast<int>(tokens.size()); }
  int n_seqs() const { return static_cast<int>(seq_lens.size()); }
  int n_out() const { return static_cast<int>(logits_indices.size()); }
};

// Owning storage behind a ForwardBatch (the engine's step buffers, tests, benchmarks): fill the vectors (same
// shapes as ForwardBatch's spans), then view(). query_start starts as {0}.
struct BatchArrays {
  std::vector<int32_t> tokens, positions, slot_mapping, query_start{0}, seq_lens, block_tables, logits_indices;
  int max_blocks_per_seq = 0;

  ForwardBatch view() const {
    ForwardBatch b;
    b.tokens = tokens;
    b.positions = positions;
    b.slot_mapping = slot_mapping;
    b.query_start = query_start;
    b.seq_lens = seq_lens;
    b.block_tables = block_tables;
    b.max_blocks_per_seq = max_blocks_per_seq;
    b.logits_indices = logits_indices;
    return b;
  }
  void clear() {  // keeps the capacity
    tokens.clear();
    positions.clear();
    slot_mapping.clear();
    query_start.assign(1, 0);
    seq_lens.clear();
    block_tables.clear();
    logits_indices.clear();
    max_blocks_per_seq = 0;
  }
};

// What a runner can take, for validate_batch(). 0 = no limit for max_tokens, max_seqs and max_context_blocks.
struct BatchLimits {
  int n_vocab = 0;
  int n_blocks = 0, block_size = 0;  // the KV pool
  int max_tokens = 0, max_seqs = 0;
  int max_context_blocks = 0;        // blocks one sequence may span (the runner's block-table stride)
  bool consecutive_positions = false;  // a sequence's tokens at consecutive positions
  bool unique_logits_indices = false;
};
// Range-checks every array of `b` against the limits (sizes, token ids, slots, block ids, positions, logits
// indices); an error says what is wrong. Both runners call it first in forward().
Status validate_batch(const ForwardBatch& b, const BatchLimits& lim);

// kAuto (RunnerOptions only): CUDA when the build has it and a GPU is usable, else the CPU.
enum class DeviceKind { kCpu, kCuda, kAuto };
const char* device_name(DeviceKind d);

// Per-row settings of a sampling forward (ModelRunner::forward_sample): what a device sampler supports.
struct RowSampling {
  float temperature = 0.f;  // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // >= 1: off
  float min_p = 0.f;        // 0: off
  uint64_t seed = 0;        // per row and step: the draw is a pure function of (logits, settings, seed)
  // Allowed ids (a grammar's mask): empty = every id; else [ceil(n_vocab / 64)] words, bit t%64 of word t/64 set
  // = id t may be drawn. The other ids are treated as -inf logits before every filter (greedy included). Must
  // allow at least one id. Only for runners whose can_sample_masked() is true. Points into caller memory that
  // must stay valid for the forward_sample call.
  std::span<const uint64_t> allowed;
};

// What a backend reports about itself while it runs, for monitoring (/metrics, `mopt gate`). Read on the
// engine thread between steps.
struct RunnerRuntimeStats {
  bool cuda_graphs_enabled = false;  // the backend replays CUDA graphs for decode steps (CUDA, not --enforce-eager)
  int cuda_graphs = 0;               // graph instances captured so far
  uint64_t cuda_graph_launches = 0;  // steps that ran as a graph replay
  int64_t device_memory_used = -1;   // bytes in use on the device, all processes (CUDA); -1: no device memory
};

// What ModelRunner::warmup did (docs/warmup.md). Times are wall seconds.
struct WarmupReport {
  double tuning_s = 0;     // eager steps that tuned GEMMs (or took their plans from the plan cache)
  double capture_s = 0;    // CUDA graph capture, with the in-graph refinement of GEMM tilings
  int eager_shapes = 0;    // eager step shapes run
  int graphs = 0;          // decode graphs captured
  uint64_t plans_tuned = 0;       // GEMM plans timed during the warm-up
  uint64_t plans_from_cache = 0;  // GEMM plans taken from the plan cache instead
  std::string plan_cache;  // what happened to the plan cache ("off", "hit <path>", "written <path>", ...)
};
// Progress of a warm-up: `done` of `total` steps, the current one described by `what`.
using WarmupProgress = std::function<void(int done, int total, const std::string& what)>;

// Work a runner does inside steps that should have happened before serving: GEMM shapes planned (timed, or
// searched by cuBLASLt's heuristic) and CUDA graphs captured so far (monotonic, thread-safe).
struct TuningCounters {
  uint64_t gemm_tunings = 0;
  uint64_t graph_captures = 0;
  TuningCounters& operator+=(const TuningCounters& o) {
    gemm_tunings += o.gemm_tunings;
    graph_captures += o.graph_captures;
    return *this;
  }
};

// GPU time of one eagerly run step per kernel class (ModelRunner::profile_step), summed over layers.
struct StepProfile {
  struct Class {
    std::string name;
    double us = 0.0;    // GPU time, microseconds
    int launches = 0;   // marks taken for this class (one per layer for per-layer classes)
  };
  std::vector<Class> classes;  // in the order first seen
  double total_us = 0.0;
  const Class* find(std::string_view name) const {
    for (const Class& c : classes)
      if (c.name == name) return &c;
    return nullptr;
  }
  // One line per class: name, us, share of the total, launches; then the total.
  std::string format() const {
    std::string out;
    char line[160];
    for (const Class& c : classes) {
      std::snprintf(line, sizeof line, "  %-32s %9.1f us %5.1f%%  (%d launches)\n", c.name.c_str(), c.us,
                    total_us > 0 ? 100.0 * c.us / total_us : 0.0, c.launches);
      out += line;
    }
    std::snprintf(line, sizeof line, "  %-32s %9.1f us\n", "total (eager, events between kernels)", total_us);
    return out + line;
  }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual DeviceKind device() const = 0;
  virtual const ModelConfig& config() const = 0;

  // Bytes one KV block of `block_size` tokens takes on this backend (all layers, K and V).
  virtual uint64_t kv_block_bytes(int block_size) const = 0;
  // The KV block size (tokens) used when the engine's is 0 (--block-size 0, the default).
  virtual int default_block_size() const { return 16; }
  // Memory the backend can give the KV cache, after weights and workspace (for --gpu-memory-utilization).
  virtual uint64_t available_kv_memory(double memory_utilization) const = 0;
  // Allocates the device cache (n_blocks) and a host swap pool (n_swap_blocks, may be 0). Called once.
  virtual Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) = 0;

  // One forward pass. logits: [n_out, n_vocab] fp32, host memory.
  virtual Status forward(const ForwardBatch& batch, float* logits) = 0;

  // True when forward_sample() is implemented (the CUDA backend samples on the GPU; the CPU runner picks greedy
  // rows inside its forward threads).
  virtual bool can_sample() const { return false; }
  // True when forward_sample() also draws rows with temperature > 0 (top-k/top-p/min-p, seeds); false: it picks
  // greedy rows only, and the caller samples the others on the host from sampled_logits().
  virtual bool can_sample_random() const { return can_sample(); }
  // True when forward_sample() honours RowSampling::allowed (token masks); false: it refuses rows with a mask.
  virtual bool can_sample_masked() const { return false; }
  // The most output rows forward_sample() takes in one step; 0: max_seqs (RunnerOptions).
  virtual int max_sample_rows() const { return 0; }
  // One forward pass that picks the next token of every output row on the device and returns only the ids:
  // tokens [n_out]; params [n_out] (empty = greedy for all). Saves forward()'s [n_out, n_vocab] logits copy.
  virtual Status forward_sample(const ForwardBatch& batch, std::span<const RowSampling> params, int32_t* tokens);
  // After forward_sample(): the fp32 logits its output rows `rows` were sampled from (indices into [0, n_out),
  // any order): logits [rows.size(), n_vocab], host memory. Lets the engine finish rows that need the host
  // sampler (logprobs, penalties, banned ids) from the same forward pass. Valid until the next forward call.
  virtual Status sampled_logits(std::span<const int32_t> rows, float* logits);

  // Monitoring figures (RunnerRuntimeStats); the default: no device, no graphs.
  virtual RunnerRuntimeStats runtime_stats() const { return {}; }
  // After init_kv_cache, before the first request: runs every step shape the engine's limits (max_seqs,
  // max_batch_tokens) allow that would otherwise tune or capture inside a request (CUDA: every decode graph bucket,
  // every eagerly run GEMM row count that is timed), taking plans from the plan cache when it has them and
  // writing it afterwards. It writes K/V into cache slots that no request owns yet. A runner with nothing to warm
  // (the CPU runner: no tuning, no graphs) returns an empty report at once.
  virtual Result<WarmupReport> warmup(const WarmupProgress& progress) {
    (void)progress;
    return WarmupReport{};
  }
  virtual TuningCounters tuning_counters() const { return {}; }
  // Benchmarks: runs `batch` once with the device time of each kernel class measured (StepProfile; CUDA:
  // CudaModelRunner's). The default (CPU): an error saying the runner has no per-kernel profile.
  virtual Result<StepProfile> profile_step(const ForwardBatch& batch);

  // Swap blocks between the device cache and the host swap pool: pairs of (device_block, host_block).
  virtual Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) = 0;
  virtual Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) = 0;
};

// Compute precision of the CUDA runner (weights, KV cache, activations, GEMMs), like vLLM's --dtype. kAuto:
// fp32 when the checkpoint's weight matrices are F32, bf16 otherwise. The CPU backend always computes in fp32.
enum class ComputeDtype { kAuto, kFloat32, kBFloat16 };
const char* compute_dtype_name(ComputeDtype d);  // the --dtype spelling: "auto", "float32", "bfloat16"

// Element type of the KV cache (vLLM/llama.cpp --kv-cache-dtype). CPU: kAuto = fp16 (values rounded to fp16 when
// written, widened exactly to fp32 when read; docs/cpu.md "KV cache" says why it is the default); kFp8 is refused.
// CUDA: the cache follows --dtype (kAuto, kFloat32 and kFloat16 alike) unless kFp8: E4M3 with per-head scales
// (bf16 compute only; docs/cuda.md "FP8 KV cache"), one byte per element.
enum class KvCacheDtype { kAuto, kFloat32, kFloat16, kFp8 };
const char* kv_cache_dtype_name(KvCacheDtype d);  // the --kv-cache-dtype spelling: "auto", "fp32", "fp16", "fp8"

// The most tokens proposed per sequence and step (num_speculative_tokens): proposals beyond this cost more
// verification than they can save.
inline constexpr int kMaxSpecTokens = 64;

struct RunnerOptions {
  DeviceKind device = DeviceKind::kAuto;
  int n_threads = 0;          // CPU: 0 = all cores
  int max_batch_tokens = 2048;// largest n_tokens a forward() will be given (sizes workspaces)
  int max_seqs = 256;         // largest n_seqs
  // Speculative decoding (docs/speculative.md): the most proposed tokens per step (num_speculative_tokens; 0:
  // none). CUDA: forward_sample takes max_seqs + spec_tokens rows, and verification steps of up to 8 rows run
  // in CUDA graphs (warmed up) with the logits plain decoding gives.
  int spec_tokens = 0;
  bool enforce_eager = false; // CUDA: no graphs
  ComputeDtype dtype = ComputeDtype::kAuto;  // CUDA: compute precision
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;  // CPU: KV cache element type; CUDA: kFp8 or the compute dtype
  // CUDA: the persistent plan cache (backend/plan_cache.h) read and written by warmup(); "" = the default
  // directory (default_plan_cache_dir()). The CPU backend tunes nothing and has no plans to cache.
  bool plan_cache = true;
  std::string plan_cache_dir;
  // CPU: repack Q4_0 / Q8_0 matrices into interleaved row groups at load (backend/cpu/qgemm.h; a second copy of
  // those weights in memory). false keeps the row kernels on the file's own blocks (bench_decode's baseline).
  bool cpu_repack = true;
  // --tensor-parallel-size: shards of the model (docs/tensor_parallel.md). CPU: that many shards in one process,
  // one worker thread each, n_threads divided among them; CUDA: only 1 so far.
  int tensor_parallel_size = 1;
  // CUDA (docs/speculative.md, "One-row plans with the verification rows in view"): > 0 chooses each one-row
  // fused decode plan among the tilings within (1 + eps) of the fastest one-row time by its reduction order's
  // 8-row time (what a speculative verification step's rows then cost), in every engine alike, speculative or
  // not. 0: the fastest one-row tiling. < 0: the backend's default (CUDA: kDefaultOneRowPlanEps in
  // cuda_runner.h; the CPU runner has no GEMM plans and refuses > 0). Tensor-parallel shards take 0.
  float one_row_plan_eps = -1.f;
  // CUDA: the first capture of each verification graph (speculative decoding) re-times the next-best tilings and
  // row slices of its GEMMs inside the graph, among those of the one-row plans' reduction orders (the rows keep
  // the one-row decode's bits). false: the isolated timings' choice (benchmarks compare the two).
  bool refine_verification_graphs = true;
  // CUDA: called on the loading thread as the weight upload reads the checkpoint's tensors (bytes read, of the
  // tensors' total), so that a caller can draw its progress; empty: none. Only the model's own runner reports
  // (not a speculative draft model's, nor tensor-parallel shards').
  std::function<void(uint64_t done, uint64_t total)> load_progress;
};

// kAuto -> kCuda when cuda_device_available(), else kCpu; other kinds unchanged.
DeviceKind resolve_device(DeviceKind requested);

// Creates the runner for the requested device ("not built with CUDA" when asked for CUDA without it); kAuto is
// resolved (and the choice logged) first.
Result<std::unique_ptr<ModelRunner>> create_runner(const Model& model, const RunnerOptions& opts);

}  // namespace mopt
