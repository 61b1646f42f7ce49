#include "plan/plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/quant_layout.h"
#include "core/strfmt.h"

namespace mopt::plan {
namespace {

// The runners' default KV block sizes (CpuRunner / CudaRunner::default_block_size(); the plan-vs-engine test
// holds the CPU one to the runner's).
constexpr int kCpuDefaultBlockSize = 64;
constexpr int kCudaDefaultBlockSize = 16;
// CUDA runner figures (backend/cuda/cuda_runner.cpp): the reserve available_kv_memory() keeps for CUDA graphs and
// cuBLAS internals, the cuBLASLt workspace (Gemm::init), and the attention split-K partials per (sequence, head).
constexpr uint64_t kCudaMarginBytes = uint64_t{256} << 20;
constexpr uint64_t kGemmWorkspaceBytes = uint64_t{32} << 20;
constexpr uint64_t kAttnSplits = 16;
// Estimate: the CUDA context with the backend's kernels and cuBLAS handles loaded (not measured here; the H200 run
// of acceptance 3 compares it).
constexpr uint64_t kCudaContextBytes = uint64_t{512} << 20;
// Decode batch sizes the CUDA runner captures graphs for (kGraphBuckets in cuda_runner.cpp).
constexpr int kGraphBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,  96,  128, 160,
                                 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512};
// The CPU runner packs fp32 matrices for batched products when they take at most this (kPackMaxBytes).
constexpr double kCpuPackMaxBytes = 256.0 * (1 << 20);
constexpr int kPackedPanel = 16;

struct Format {
  std::string name;
  bool as_stored = false;      // "auto" on the CPU
  std::optional<DType> dtype;  // a GGUF / plain type
  double bytes_per_elem = 0;   // fp8, int8, int4 (with their scales)
};

Result<Format> parse_format(const std::string& f) {
  Format fmt;
  fmt.name = f;
  if (f == "auto") return fmt;
  if (f == "fp8" || f == "int8") {
    fmt.bytes_per_elem = 1;  // + one fp32 scale per output row, added below
    return fmt;
  }
  if (f == "int4") {
    fmt.bytes_per_elem = 68.0 / 128.0;  // AWQ, groups of 128: 64 bytes of nibbles + fp16 scale + fp16 zero
    return fmt;
  }
  auto t = dtype_from_name(f);
  if (!t || *t == DType::Q8_K || *t == DType::I8 || *t == DType::I32)
    return error(
        "unknown --weight-format '%s': use auto, f32, f16, bf16, fp8, int8, int4, q8_0, q6_k, q5_k, q4_k "
        "or q4_0",
        f.c_str());
  fmt.dtype = t;
  return fmt;
}

bool is_embedding(const TensorShape& t) { return t.name == "token_embd.weight"; }

// Fraction of tensor t one GPU of a tensor-parallel group holds: matrices split tp ways (vocabulary-parallel
// embedding and output too); K/V projections are replicated per GPU when there are fewer KV heads than GPUs;
// vectors are replicated.
double tp_share(const TensorShape& t, const ModelConfig& c, int tp) {
  if (tp == 1) return 1.0;
  const bool kv = t.name.find("attn_k.") != std::string::npos || t.name.find("attn_v.") != std::string::npos;
  if (kv && c.n_head_kv < tp) return 1.0 / c.n_head_kv;
  if (!t.is_matrix() && !kv && t.name.find("attn_q.bias") == std::string::npos) return 1.0;
  return 1.0 / tp;
}

uint64_t tensor_bytes(const TensorShape& t, const Format& f, DeviceKind dev, int compute_es) {
  const uint64_t elems = t.cols * t.rows;
  if (!t.is_matrix()) return elems * (dev == DeviceKind::kCuda ? compute_es : 4);  // norms, biases
  if (f.name == "auto") return t.stored_bytes ? t.stored_bytes : elems * 2;  // config.json: bf16 as published
  if (f.dtype) {
    auto rb = row_bytes(*f.dtype, t.cols);
    return (rb ? *rb : t.cols * 2) * t.rows;
  }
  return static_cast<uint64_t>(std::ceil(static_cast<double>(elems) * f.bytes_per_elem)) + 4 * t.rows;
}

// The dtype matrix t is planned in: the format's (mopt quantize's safetensors layouts fp8, int8 and int4 keep the
// embedding and the LM head in bf16, its GGUF types quantize them too), else as stored (bf16 for a config.json).
DType planned_dtype(const TensorShape& t, const Format& f) {
  if (f.dtype) return *f.dtype;
  if ((is_embedding(t) || t.name == "output.weight") && f.name != "auto") return DType::BF16;
  if (f.name == "fp8") return DType::FP8;
  if (f.name == "int8") return DType::INT8;
  if (f.name == "int4") return DType::INT4_G128;
  return t.dtype.value_or(DType::BF16);
}

// The CUDA runner's fused matrix that layer matrix `name` is a part of ("blk.N.qkv", "blk.N.gate_up", the shared
// expert's "blk.N.sh_gate_up"), or name itself: the parts of one fused matrix share one device format.
std::string fused_matrix(const std::string& name) {
  static const std::pair<const char*, const char*> kParts[] = {
      {"attn_q.weight", "qkv"},        {"attn_k.weight", "qkv"},          {"attn_v.weight", "qkv"},
      {"ffn_gate.weight", "gate_up"},  {"ffn_up.weight", "gate_up"},      {"ffn_gate_shexp.weight", "sh_gate_up"},
      {"ffn_up_shexp.weight", "sh_gate_up"}};
  if (!name.starts_with("blk.") || !name.ends_with(".weight")) return name;
  const size_t dot = name.rfind('.', name.size() - sizeof(".weight"));  // before the part's own name
  for (const auto& [part, whole] : kParts)
    if (name.compare(dot + 1, std::string::npos, part) == 0) return name.substr(0, dot + 1) + whole;
  return name;
}

// Matrix t's bytes on a GPU (runner_weights.cpp), before the tensor-parallel share: the embedding, MoE experts and
// routers in the compute dtype; the other matrices in the device format of their fused matrix's dtypes
// (backend/cuda/quant_layout.h), or the compute dtype where those have none (or in fp32 compute). The LM head (the
// output matrix, or the embedding when tied) in a quantized format is held in the compute dtype and, where decode
// takes the fused path (bf16, no MLA), also in its format (CudaRunner::output_q_): `lm_head` is then that copy's
// bytes, which a decode step reads instead (0 otherwise).
struct CudaMatrixBytes {
  uint64_t held = 0, lm_head = 0;
};
CudaMatrixBytes cuda_matrix_bytes(const TensorShape& t, const Format& f, int es, const ModelConfig& c,
                                  const std::map<std::string, std::vector<DType>>& fused) {
  const uint64_t plain = t.cols * t.rows * static_cast<uint64_t>(es);
  const bool moe = t.experts > 1 || t.name.find("ffn_gate_inp") != std::string::npos;
  const bool head = t.name == "output.weight" || (is_embedding(t) && c.tied_embeddings);
  if (es == 4 || moe || (is_embedding(t) && !head) || (head && c.is_mla())) return {plain, 0};
  const auto parts = fused.find(fused_matrix(t.name));
  const std::optional<cuda::QuantPlan> qp =
      dtype_traits(planned_dtype(t, f)).cuda_upload == CudaUpload::kRepack && parts != fused.end()
          ? cuda::plan_quantized(parts->second)
          : std::nullopt;
  if (!qp) return {plain, 0};
  const uint64_t q = cuda::quant_matrix_bytes(*qp, static_cast<int64_t>(t.rows), static_cast<int64_t>(t.cols));
  if (head) {  // the runner keeps the format's copy only where its width fits the format (runner_weights.cpp)
    if (!cuda::plan_fits(*qp, static_cast<int64_t>(t.cols))) return {plain, 0};
    return {plain + q, q};
  }
  return {q, 0};
}

// The mopt quantize target that writes format f (plan's --weight-format), or "" when none does.
std::string quantize_target(const std::string& f) {
  if (f == "int4") return "awq";
  if (f == "q4_k" || f == "q5_k") return f + "_m";
  if (f == "fp8" || f == "int8" || f == "q8_0" || f == "q4_0" || f == "q6_k") return f;
  return "";
}

uint64_t cuda_workspace(const ModelConfig& c, const EngineConfig& e, int es, int tp) {
  const uint64_t T = static_cast<uint64_t>(std::max(e.max_num_batched_tokens, e.max_num_seqs));
  const uint64_t S = static_cast<uint64_t>(e.max_num_seqs);
  const uint64_t d = static_cast<uint64_t>(c.n_embd), q = static_cast<uint64_t>(c.q_dim()) / tp,
                 kv = static_cast<uint64_t>(std::max(1, c.n_head_kv / tp)) * static_cast<uint64_t>(c.head_dim),
                 ff = static_cast<uint64_t>(c.n_ff) / tp, h = static_cast<uint64_t>(c.n_head) / tp;
  const uint64_t E = static_cast<uint64_t>(es);
  uint64_t b = T * d * 4;                                     // residual stream, fp32
  b += T * (d + (q + 2 * kv) + q + q + d + 2 * ff + ff) * E;  // normed, qkv, q, attn, proj, gate|up, act
  b += S * static_cast<uint64_t>(c.n_vocab) * 4;              // logits
  b += S * (4 + 24);                                          // sampled ids, sampling settings
  b += S * h * kAttnSplits * (static_cast<uint64_t>(c.head_dim) + 2) * 4 + S * h * 4;  // split-K partials, counters
  return b;
}

uint64_t cpu_workspace(const ModelConfig& c, const EngineConfig& e, bool packed) {
  const uint64_t T = static_cast<uint64_t>(std::max(1, e.max_num_batched_tokens));
  const uint64_t S = static_cast<uint64_t>(e.max_num_seqs);
  const uint64_t d = static_cast<uint64_t>(c.n_embd), q = static_cast<uint64_t>(c.q_dim()),
                 kv = static_cast<uint64_t>(c.kv_dim()), ff = static_cast<uint64_t>(c.n_ff);
  uint64_t per_token = 2 * d + 2 * q + 2 * kv + 2 * ff + static_cast<uint64_t>(c.rope_dim);
  if (packed) per_token += q + 2 * kv + 2 * ff;
  if (c.is_moe()) {  // cpu::MoeScratch: router probabilities, then per (token, pick) input, gate, up and output rows
    const uint64_t k = static_cast<uint64_t>(c.n_expert_used), fe = static_cast<uint64_t>(c.n_ff_exp),
                   sh = static_cast<uint64_t>(c.n_ff_shexp);
    per_token += static_cast<uint64_t>(c.n_expert) + 4 * k + k * (2 * d + 2 * fe) + 2 * sh + 2 * d;
  }
  return 4 * (T * per_token + S * d + S * static_cast<uint64_t>(c.n_vocab));  // + output rows, logits
}

std::string gib(double b) { return format_bytes(b); }

}  // namespace

Result<Plan> make_plan(const PlanRequest& req) {
  Plan p;
  const ModelConfig& c = req.model.config;
  const DeviceKind dev = req.hw.device;
  const int tp = req.tensor_parallel;
  if (dev != DeviceKind::kCpu && dev != DeviceKind::kCuda) return error("plan: the device must be cpu or cuda");
  if (c.n_layer <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 || c.n_embd <= 0)
    return error("the model config is incomplete (layers %d, heads %d/%d, head_dim %d)", c.n_layer, c.n_head,
                 c.n_head_kv, c.head_dim);
  if (tp < 1) return error("--tensor-parallel-size must be >= 1, got %d", tp);
  if (tp > 1 && dev == DeviceKind::kCpu) return error("--tensor-parallel-size > 1 plans GPUs: give --gpu NAME");
  if (c.n_head % tp != 0 || c.n_ff % tp != 0)
    return error("--tensor-parallel-size %d must divide the head count %d and the MLP width %d", tp, c.n_head, c.n_ff);
  MOPT_ASSIGN_OR_RETURN(const Format fmt, parse_format(req.weight_format));

  // Compute precision and KV element size.
  const bool f32_compute = req.engine.runner.dtype == ComputeDtype::kFloat32 ||
                           (req.engine.runner.dtype == ComputeDtype::kAuto && req.model.all_f32);
  const int es = dev == DeviceKind::kCuda && f32_compute ? 4 : 2;
  const std::string& kd = req.kv_cache_dtype;
  if (dev == DeviceKind::kCpu) {
    if (kd != "auto" && kd != "fp16" && kd != "fp32")
      return error("the CPU KV cache is fp16 (auto) or fp32; --kv-cache-dtype %s is not one of them", kd.c_str());
    p.kv_elem_bytes = kd == "fp32" ? 4 : 2;
  } else {
    if (kd != "auto" && kd != "fp16" && kd != "bf16" && kd != "fp32" && kd != "fp8")
      return error("--kv-cache-dtype must be auto, fp16, bf16, fp32 or fp8, got %s", kd.c_str());
    p.kv_elem_bytes = kd == "auto" ? es : kd == "fp32" ? 4 : kd == "fp8" ? 1 : 2;
    if (kd == "fp8" && es == 4)
      p.notes.push_back("mopt's CUDA fp8 KV cache needs --dtype bfloat16: with float32 compute mopt serve refuses "
                        "--kv-cache-dtype fp8; the fp8 cache is planned here anyway");
    else if (kd != "fp8" && p.kv_elem_bytes != es)
      p.notes.push_back("mopt's CUDA KV cache follows --dtype (" + std::string(es == 4 ? "fp32" : "bf16") + "): a " +
                        kd + " cache is planned here, not what mopt serve allocates");
  }
  const int kv_heads = std::max(1, c.n_head_kv / tp);
  p.kv_bytes_per_token = 2ull * static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(kv_heads) *
                         static_cast<uint64_t>(c.head_dim) * static_cast<uint64_t>(p.kv_elem_bytes);

  // Weights (per GPU), and what one decode step reads of them.
  std::map<std::string, std::vector<DType>> fused;  // CUDA: each fused matrix's parts' dtypes
  for (const TensorShape& t : req.model.tensors)
    if (t.is_matrix()) fused[fused_matrix(t.name)].push_back(planned_dtype(t, fmt));
  double weights = 0, decode = 0, matrix_bytes = 0;
  for (const TensorShape& t : req.model.tensors) {
    const double share = tp_share(t, c, tp);
    const bool read = !is_embedding(t) || c.tied_embeddings;  // by a decode step
    double b = static_cast<double>(tensor_bytes(t, fmt, dev, es)) * share;
    double b_read = b;
    if (dev == DeviceKind::kCuda && t.is_matrix()) {
      const CudaMatrixBytes cb = cuda_matrix_bytes(t, fmt, es, c, fused);
      b = static_cast<double>(cb.held) * share;
      b_read = static_cast<double>(cb.lm_head ? cb.lm_head : cb.held) * share;  // one row reads the quantized copy
    }
    weights += b;
    if (read) decode += b_read * req.model.token_share(t);  // MoE: the picked experts
    if (t.is_matrix() && read) matrix_bytes += b;
  }
  p.weight_desc = dev == DeviceKind::kCuda ? (es == 4 ? "fp32" : "bf16") + std::string(" on the GPU")
                                           : (fmt.name == "auto" ? "as stored (memory-mapped)" : fmt.name);
  bool quantized = false;  // CUDA: some matrix has a device format
  for (const TensorShape& t : req.model.tensors)
    quantized = quantized || (t.is_matrix() && dtype_traits(planned_dtype(t, fmt)).cuda_upload == CudaUpload::kRepack);
  if (dev == DeviceKind::kCuda && quantized && es == 2)
    p.weight_desc =
        (fmt.name == "auto" ? std::string("as stored") : fmt.name) + " in the GPU's layouts (embeddings in bf16)";
  if (dev == DeviceKind::kCuda && quantized && es == 4)
    p.notes.push_back("mopt's CUDA backend runs quantized weights in bfloat16 only: mopt serve refuses --dtype "
                      "float32 for them (planned here in float32 anyway)");
  if (dev == DeviceKind::kCuda && fmt.name != "auto" && fmt.name != "bf16" && fmt.name != "f16" && fmt.name != "f32") {
    const std::string to = quantize_target(fmt.name);
    p.notes.push_back("weights planned in " + fmt.name + ": mopt serve loads the weights as stored, so convert the "
                      "model first" + (to.empty() ? std::string() : " (mopt quantize MODEL -o OUT --to " + to + ")"));
  }
  if (c.is_moe())
    p.notes.push_back(strfmt("mixture of experts: %d of %d experts per token; the decode figures count the weights one "
                             "token reads (a batch reads more experts, up to all)%s", c.n_expert_used, c.n_expert,
                             dev == DeviceKind::kCuda ? "; mopt's CUDA backend runs its experts in bf16 (quantized "
                                                        "experts are dequantized at load)" : ""));
  if (dev == DeviceKind::kCpu && fmt.name != "auto")
    p.notes.push_back("the CPU backend runs the weights as stored: convert the model to " + fmt.name +
                      " for this plan (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K run)");
  const bool cpu_packed =
      dev == DeviceKind::kCpu && fmt.name == "auto" && req.model.all_f32 && matrix_bytes <= kCpuPackMaxBytes &&
      !c.is_moe();  // the CPU runner packs no MoE model
  if (cpu_packed) {  // packed copies in panels of 16 output rows
    double packed = 0;
    for (const TensorShape& t : req.model.tensors)
      if (t.is_matrix() && (!is_embedding(t) || c.tied_embeddings))
        packed +=
            4.0 * static_cast<double>(t.cols) * std::ceil(static_cast<double>(t.rows) / kPackedPanel) * kPackedPanel;
    weights += packed;
    p.weight_desc += " + packed fp32 copies for batches";
  }
  p.weight_bytes = static_cast<uint64_t>(weights);
  p.decode_read_bytes = static_cast<uint64_t>(decode);

  // Activations and fixed costs.
  EngineConfig e = req.engine;
  if (dev == DeviceKind::kCuda) {
    p.activation_bytes = cuda_workspace(c, e, es, tp);
    p.runtime_bytes = kCudaContextBytes + kGemmWorkspaceBytes;
    p.margin_bytes = kCudaMarginBytes;
    if (!e.runner.enforce_eager)
      for (int b : kGraphBuckets) p.cuda_graphs += b <= e.max_num_seqs;
  } else {
    p.activation_bytes = cpu_workspace(c, e, cpu_packed);
  }

  // The memory budget the engine's sizing sees.
  if (dev == DeviceKind::kCuda) {
    const double avail = e.gpu_memory_utilization * static_cast<double>(req.hw.memory_bytes) -
                         static_cast<double>(req.hw.used_by_others);
    const double fixed = static_cast<double>(p.weight_bytes + p.activation_bytes + p.runtime_bytes + p.margin_bytes);
    if (e.kv_cache_memory == 0 && fixed >= avail)
      return error(
          "the weights (%s per GPU), workspace (%s) and CUDA runtime (%s) do not fit %.0f%% of %s's %s%s: "
          "use a bigger GPU, a higher --tensor-parallel-size, or a smaller --weight-format",
          gib(static_cast<double>(p.weight_bytes)).c_str(), gib(static_cast<double>(p.activation_bytes)).c_str(),
          gib(static_cast<double>(p.runtime_bytes + p.margin_bytes)).c_str(), 100 * e.gpu_memory_utilization,
          req.hw.name.c_str(), gib(static_cast<double>(req.hw.memory_bytes)).c_str(),
          req.hw.used_by_others ? (", of which others hold " + gib(static_cast<double>(req.hw.used_by_others))).c_str()
                                : "");
    p.memory_budget = static_cast<uint64_t>(avail - fixed);
  } else {
    // CpuRunner::available_kv_memory(): the RAM available now times --gpu-memory-utilization.
    p.memory_budget = static_cast<uint64_t>(static_cast<double>(req.hw.memory_bytes) *
                                            std::clamp(e.gpu_memory_utilization, 0.0, 1.0));
  }
  p.kv_request = {.device = dev,
                  .block_size = e.block_size,
                  .default_block_size = dev == DeviceKind::kCpu ? kCpuDefaultBlockSize : kCudaDefaultBlockSize,
                  .max_model_len = e.max_model_len,
                  .context_length = c.context_length,
                  .max_num_seqs = e.max_num_seqs,
                  .kv_bytes_per_token = p.kv_bytes_per_token,
                  .kv_cache_memory = e.kv_cache_memory,
                  .memory_budget = p.memory_budget,
                  .gpu_memory_utilization = e.gpu_memory_utilization,
                  .draft_kv_bytes_per_token = req.draft_kv_bytes_per_token,
                  .num_speculative_tokens = req.draft_kv_bytes_per_token ? e.speculative.num_speculative_tokens : 0};
  MOPT_ASSIGN_OR_RETURN(p.kv, size_kv_cache(p.kv_request));

  const uint64_t budget_blocks = p.kv.blocks_in(e.kv_cache_memory ? e.kv_cache_memory : p.memory_budget);
  p.budget_concurrency = static_cast<double>(budget_blocks) / static_cast<double>(p.kv.blocks_per_seq);
  p.concurrency = req.concurrency > 0 ? req.concurrency : e.max_num_seqs;
  const int64_t per_seq_blocks = p.kv.num_blocks / p.concurrency;
  const int64_t ctx = c.context_length > 0 ? c.context_length : p.kv.max_model_len;
  p.max_len_at_concurrency = std::min<int64_t>(per_seq_blocks * p.kv.block_size, ctx);

  // Ceilings: decode streams the weights once per token (plus the KV of its context); prefill is compute-bound.
  if (req.hw.bandwidth > 0 && p.decode_read_bytes > 0) {
    p.decode_tokens_per_s = req.hw.bandwidth / static_cast<double>(p.decode_read_bytes);
    if (dev == DeviceKind::kCpu && req.hw.cache_bytes > 0 && p.decode_read_bytes <= req.hw.cache_bytes)
      p.notes.push_back(strfmt(
          "the weights a decode step reads (%s) fit the CPU's last-level cache (%s): decode is "
          "not bound by memory bandwidth, and can beat this ceiling",
          gib(static_cast<double>(p.decode_read_bytes)).c_str(), gib(static_cast<double>(req.hw.cache_bytes)).c_str()));
    p.decode_tokens_per_s_full =
        req.hw.bandwidth / static_cast<double>(p.decode_read_bytes + p.kv_bytes_per_token * p.kv.max_model_len);
  }
  p.prompt_len = req.prompt_len > 0 ? std::min(req.prompt_len, p.kv.max_model_len) : std::min(2048, p.kv.max_model_len);
  const double flops = fmt.name == "fp8" && req.hw.fp8_flops > 0 ? req.hw.fp8_flops : req.hw.flops;
  if (flops > 0) {
    double matmul_params = 0;  // per GPU, per prompt token (the output projection runs for the last token only)
    double out_params = 0;
    for (const TensorShape& t : req.model.tensors) {
      if (!t.is_matrix() || is_embedding(t)) continue;
      const double n = static_cast<double>(t.cols * t.rows) * tp_share(t, c, tp) * req.model.token_share(t);
      (t.name == "output.weight" ? out_params : matmul_params) += n;
    }
    if (c.tied_embeddings) out_params = static_cast<double>(c.n_embd) * c.n_vocab / tp;
    const double P = p.prompt_len;
    const double attn = 4.0 * c.n_layer * (static_cast<double>(c.q_dim()) / tp) * P * (P + 1) / 2;  // QK^T + PV, causal
    const double total = 2.0 * P * matmul_params + 2.0 * out_params + attn;
    p.ttft_s = total / flops;
    p.prefill_tokens_per_s = P / p.ttft_s;
  }

  // Flags.
  // A plan from a config.json alone names the folder the weights are in.
  std::string f =
      "mopt serve -m " +
      (req.model_path.empty() || req.model.source == "config.json" ? std::string("MODEL_FOLDER") : req.model_path);
  f += dev == DeviceKind::kCuda ? " --device cuda" : " --device cpu";
  f += strfmt(" --max-model-len %d --max-num-seqs %d --max-num-batched-tokens %d --block-size %d", p.kv.max_model_len,
              e.max_num_seqs, e.max_num_batched_tokens, p.kv.block_size);
  if (e.kv_cache_memory)
    f += strfmt(" --kv-cache-memory %llu", static_cast<unsigned long long>(e.kv_cache_memory));
  else
    f += strfmt(" --gpu-memory-utilization %.2f", e.gpu_memory_utilization);
  if (dev == DeviceKind::kCpu) f += p.kv_elem_bytes == 4 ? " --kv-cache-dtype fp32" : " --kv-cache-dtype fp16";
  if (dev == DeviceKind::kCuda) f += es == 4 ? " --dtype float32" : " --dtype bfloat16";
  if (dev == DeviceKind::kCuda && p.kv_elem_bytes == 1) f += " --kv-cache-dtype fp8";
  if (dev == DeviceKind::kCuda && e.runner.enforce_eager) f += " --enforce-eager";
  if (tp > 1) f += strfmt(" --tensor-parallel-size %d", tp);
  p.flags = f;
  if (tp > 1)
    p.notes.push_back(
        strfmt("the figures are per GPU of a %d-way tensor-parallel group (GPUs 0 .. %d, one shard each)", tp, tp - 1));
  if (dev == DeviceKind::kCuda)
    p.notes.push_back("the CUDA context and cuBLAS handles are an estimate (" +
                      gib(static_cast<double>(kCudaContextBytes)) +
                      "); the runner's own measurement at start decides the real KV budget");
  return p;
}

}  // namespace mopt::plan
