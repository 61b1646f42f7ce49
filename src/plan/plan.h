// mopt plan: what a model needs on given hardware before anything is loaded: weights (per GPU under tensor
// parallelism), KV bytes per token and block, activations and workspace, KV blocks available (the engine's own
// sizing function, size_kv_cache), concurrency and length limits, decode and prefill ceilings, and the engine flags
// that realize the plan. Formulas: docs/doctor.md ("plan").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/kv_sizing.h"
#include "plan/model_shape.h"

namespace mopt::plan {

// The memory budget and speeds of one device the plan is for.
struct Hardware {
  DeviceKind device = DeviceKind::kCpu;  // kCpu or kCuda
  std::string name;                      // "H100-SXM", "NVIDIA H200 (detected)", "CPU"
  std::string source;                    // where the figures come from ("built-in table", "NVML", "measured", ...)
  uint64_t memory_bytes = 0;             // per GPU: total device memory; CPU: RAM available now (MemAvailable)
  uint64_t used_by_others = 0;           // per GPU: memory other processes hold now (detected devices)
  double bandwidth = 0;                  // bytes/s per device; 0 = unknown
  double flops = 0;                      // dense FLOP/s at the compute precision; 0 = unknown
  double fp8_flops = 0;                  // dense FP8 FLOP/s (GPUs); 0 = none
  uint64_t cache_bytes = 0;              // CPU: last-level cache (0 = unknown)
};

struct PlanRequest {
  ModelShape model;
  std::string model_path;              // for the printed flags
  std::string weight_format = "auto";  // auto (what the backend runs), f32, f16, bf16, fp8, int8, int4, q8_0, ...
  Hardware hw;
  int tensor_parallel = 1;
  EngineConfig engine;                  // block_size, max_model_len, max_num_seqs, max_num_batched_tokens,
                                        // kv_cache_memory, gpu_memory_utilization, runner.kv_cache_dtype, runner.dtype
  std::string kv_cache_dtype = "auto";  // auto, fp32, fp16, bf16, fp8
  int concurrency = 0;                  // "max length at N sequences"; 0 = max_num_seqs
  int prompt_len = 0;                   // prefill ceiling for one prompt of this length; 0 = min(2048, max_model_len)
  // A draft model beside the model (speculative decoding): its K+V bytes per token (0: none), so that the KV pools
  // are sized together as the engine sizes them (engine/kv_sizing.h); engine.speculative gives k.
  uint64_t draft_kv_bytes_per_token = 0;
};

struct Plan {
  // Per GPU (tensor parallelism splits matrices and KV heads).
  uint64_t weight_bytes = 0;       // resident weights (CPU: the mapped file plus packed fp32 copies)
  uint64_t decode_read_bytes = 0;  // weights one decode step reads (all but the embedding lookup)
  std::string weight_desc;         // "bf16 (converted on upload)", "as stored: F32 + packed copy", ...
  int kv_elem_bytes = 2;
  uint64_t kv_bytes_per_token = 0;
  uint64_t activation_bytes = 0;  // activations and workspaces sized for max_num_batched_tokens / max_num_seqs
  uint64_t runtime_bytes = 0;     // CUDA context, cuBLAS workspace (GPU)
  uint64_t margin_bytes = 0;      // the runner's reserve for CUDA graphs and cuBLAS internals (GPU)
  int cuda_graphs = 0;            // decode batch sizes captured (GPU, unless --enforce-eager)
  uint64_t memory_budget = 0;     // what the engine's sizing sees as available for the KV cache
  KvSizingRequest kv_request;
  KvSizing kv;                    // the engine's sizing
  double budget_concurrency = 0;  // sequences of max_model_len the budget could hold (CPU: beyond the need)
  int concurrency = 0;
  int64_t max_len_at_concurrency = 0;
  double decode_tokens_per_s = 0;       // single stream, weights only (0 = bandwidth unknown)
  double decode_tokens_per_s_full = 0;  // ... with a full max_model_len of KV read per token
  int prompt_len = 0;
  double prefill_tokens_per_s = 0;  // at the compute roofline (0 = FLOP/s unknown)
  double ttft_s = 0;
  std::string flags;               // mopt serve flags that realize the plan
  std::vector<std::string> notes;  // what the engine cannot do as planned, estimates
};

Result<Plan> make_plan(const PlanRequest& req);

// Table and JSON forms of a plan.
std::string plan_table(const PlanRequest& req, const Plan& p);
std::string plan_json(const PlanRequest& req, const Plan& p);

}  // namespace mopt::plan
