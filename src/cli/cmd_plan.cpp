// mopt plan: what a model needs on given hardware (a GPU from the built-in table, the GPU detected here, or this
// machine's CPU) before anything is loaded, with the serve flags that realize it.
#include <cstdio>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "plan/gpu_specs.h"
#include "plan/hardware.h"
#include "plan/plan.h"

namespace mopt::cli {
namespace {

struct PlanArgs {
  plan::PlanRequest req;
  std::string gpu;  // --gpu NAME (built-in table)
  std::string device = "auto";
  int gpu_index = 0;
  double bandwidth_gbs = 0, tflops = 0, memory_gib = 0;
  bool measure = true;
  bool json = false;
};

Result<plan::Hardware> pick_hardware(const PlanArgs& a) {
  if (!a.gpu.empty()) {
    if (a.device == "cpu") return error("--gpu and --device cpu contradict each other: give one");
    return plan::gpu_from_table(a.gpu);
  }
  if (a.device == "cuda") return plan::detected_gpu(a.gpu_index);
  if (a.device == "auto") {
    auto g = plan::detected_gpu(a.gpu_index);
    if (g) return g;
  }
  return plan::cpu_host(a.measure);
}

int run_plan(PlanArgs& a) {
  auto shape = plan::read_model_shape(a.req.model_path);
  if (!shape) {
    std::fprintf(stderr, "mopt plan: %s\n", shape.message().c_str());
    return 1;
  }
  a.req.model = std::move(*shape);
  auto hw = pick_hardware(a);
  if (!hw) {
    std::fprintf(stderr, "mopt plan: %s\n", hw.message().c_str());
    return 1;
  }
  a.req.hw = *hw;
  if (a.memory_gib > 0) {
    a.req.hw.memory_bytes = static_cast<uint64_t>(a.memory_gib * 1073741824.0);
    a.req.hw.source += "; memory from --memory";
  }
  if (a.bandwidth_gbs > 0) a.req.hw.bandwidth = a.bandwidth_gbs * 1e9;
  if (a.tflops > 0) a.req.hw.flops = a.tflops * 1e12;
  auto p = plan::make_plan(a.req);
  if (!p) {
    std::fprintf(stderr, "mopt plan: %s\n", p.message().c_str());
    return 1;
  }
  std::fputs((a.json ? plan::plan_json(a.req, *p) + "\n" : plan::plan_table(a.req, *p)).c_str(), stdout);
  return 0;
}

Registration reg("plan", 12, [](CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  EngineConfig& e = a->req.engine;
  CLI::App* cmd = app.add_subcommand(
      "plan", "What a model needs on a GPU or CPU: weights, KV cache, concurrency, speed ceilings, serve flags");
  cmd->add_option("-m,--model", a->req.model_path,
                  "A model mopt loads (GGUF, Hugging Face folder, llama2.c), or a Hugging Face config.json alone")
      ->required();
  cmd->add_option("--weight-format", a->req.weight_format,
                  "auto (what the backend runs), f32, f16, bf16, fp8, int8, int4, q8_0, q6_k, q5_k, q4_k, q4_0")
      ->capture_default_str();
  cmd->add_option("--gpu", a->gpu, "Plan for a GPU from the built-in table: " + plan::gpu_spec_names());
  cmd->add_option("--device", a->device, "auto (the GPU detected here, else the CPU), cuda (detected GPU) or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--gpu-index", a->gpu_index, "Which detected GPU (NVML index)")->check(CLI::Range(0, 63));
  // An option limited to [lo, hi] whose --help shows its default.
  auto ranged = [cmd](const char* name, auto& value, const char* help, auto lo, auto hi) {
    cmd->add_option(name, value, help)->check(CLI::Range(lo, hi))->capture_default_str();
  };
  ranged("--tensor-parallel-size,--tp", a->req.tensor_parallel, "GPUs one model is split over", 1, 64);
  ranged("--max-model-len", e.max_model_len, "Context length limit; 0 = the model's", 0, 1 << 24);
  ranged("--block-size", e.block_size, "KV block size in tokens; 0 = the backend's (CPU 64, CUDA 16)", 0, 1024);
  ranged("--max-num-seqs", e.max_num_seqs, "Sequences per step (the CPU KV cache is sized for this many)", 1, 1 << 20);
  ranged("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget of one step (sizes workspaces)", 1,
         1 << 24);
  ranged("--gpu-memory-utilization", e.gpu_memory_utilization,
         "Fraction of GPU memory (or of available RAM, the CPU cap) mopt may use", 0.0, 1.0);
  cmd->add_option("--kv-cache-memory", e.kv_cache_memory, "Explicit KV cache size in bytes (suffixes allowed)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--kv-cache-dtype", a->req.kv_cache_dtype,
                  "auto, fp16, fp32 (CPU); auto, bf16, fp16, fp32, fp8 (GPU)")
      ->capture_default_str();
  const std::map<std::string, ComputeDtype> dtypes{
      {"auto", ComputeDtype::kAuto}, {"float32", ComputeDtype::kFloat32}, {"bfloat16", ComputeDtype::kBFloat16}};
  cmd->add_option("--dtype", e.runner.dtype, "CUDA compute precision: auto, float32 or bfloat16")
      ->transform(CLI::CheckedTransformer(dtypes, CLI::ignore_case));
  cmd->add_flag("--enforce-eager", e.runner.enforce_eager, "CUDA: no graphs");
  cmd->add_option("--concurrency", a->req.concurrency,
                  "Report the longest sequence at this many (default --max-num-seqs)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--prompt-len", a->req.prompt_len, "Prompt length of the prefill ceiling (default min(2048, len))")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--memory", a->memory_gib, "Override the device memory, GiB")->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--bandwidth", a->bandwidth_gbs, "Override the memory bandwidth, GB/s")
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--tflops", a->tflops, "Override the dense FLOP/s, in TFLOP/s")->check(CLI::Range(0.001, 1e6));
  cmd->add_flag_callback(
      "--no-measure", [a] { a->measure = false; }, "CPU: do not measure bandwidth and FLOP/s");
  cmd->add_flag("--json", a->json, "Print the plan as JSON");
  cmd->callback([a]() { set_exit_code(run_plan(*a)); });
});

}  // namespace
}  // namespace mopt::cli
