#include "cli/engine_flags.h"

#include <cctype>
#include <map>
#include <string>

#include "server/speculative_config.h"

namespace mopt {

const std::map<std::string, KvCacheDtype>& kv_cache_dtype_spellings() {
  static const std::map<std::string, KvCacheDtype> kNames{
      {"auto", KvCacheDtype::kAuto},    {"fp32", KvCacheDtype::kFloat32}, {"float32", KvCacheDtype::kFloat32},
      {"fp16", KvCacheDtype::kFloat16}, {"float16", KvCacheDtype::kFloat16}, {"fp8", KvCacheDtype::kFp8},
      {"fp8_e4m3", KvCacheDtype::kFp8}};
  return kNames;
}

void add_engine_flags(CLI::App& app, EngineConfig& cfg) {
  const std::string g = "Engine";
  // An option that takes one of the spellings in `names` (any case) and stores its enum value. `refused`: other
  // tools' spellings (vLLM's) mopt cannot honour, each with the reason given instead of CLI11's list of values.
  auto enum_option = [&app, &g](const char* name, auto& value, const auto& names, const char* help,
                                std::map<std::string, std::string> refused = {}) {
    CLI::Option* opt =
        app.add_option(name, value, help)->transform(CLI::CheckedTransformer(names, CLI::ignore_case))->group(g);
    if (refused.empty()) return;
    // CLI11 runs transforms last-added first: this one sees the spelling before the CheckedTransformer does.
    opt->transform(CLI::Validator(
        [refused](std::string& v) {
          std::string key = v;
          for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          auto it = refused.find(key);
          return it == refused.end() ? std::string() : "'" + v + "': " + it->second;
        },
        "", "refused spellings"));
  };
  app.add_option("--block-size", cfg.block_size,
                 "KV cache block size in tokens (e.g. 16, 32, 64); 0 = the backend's default (CPU 64, CUDA 16)")
      ->check(CLI::Range(0, 1024))->capture_default_str()->group(g);
  app.add_option("--kv-cache-memory", cfg.kv_cache_memory,
                 "KV cache size in bytes, suffixes allowed (e.g. 512MiB, 2GB); 0 = from --gpu-memory-utilization")
      ->transform(CLI::AsSizeValue(false))->group(g);
  app.add_option("--gpu-memory-utilization", cfg.gpu_memory_utilization,
                 "fraction of device memory (CUDA) or of the RAM budget (CPU) for weights + KV cache")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str()->group(g);
  app.add_option("--swap-space", cfg.swap_space_gib, "host swap pool for preempted requests, GiB")
      ->check(CLI::Range(0.0, 1048576.0))->capture_default_str()->group(g);
  app.add_flag_callback("--no-prefix-caching,--no-enable-prefix-caching",
                        [&cfg] { cfg.enable_prefix_caching = false; },
                        "disable prefix caching (the second spelling is vLLM's)")->group(g);
  app.add_flag_callback("--enable-prefix-caching", [&cfg] { cfg.enable_prefix_caching = true; },
                        "enable prefix caching (the default; vLLM's spelling)")->group(g);
  app.add_option("--max-num-seqs", cfg.max_num_seqs, "most sequences in one step")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str()->group(g);
  app.add_option("--max-num-batched-tokens", cfg.max_num_batched_tokens,
                 "token budget of one step (prefill chunks + decodes)")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str()->group(g);
  app.add_option("--max-model-len", cfg.max_model_len, "context length limit (prompt + output); 0 = the model's")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str()->group(g);
  const std::map<std::string, SchedulingPolicy> policies{{"fcfs", SchedulingPolicy::kFcfs},
                                                         {"priority", SchedulingPolicy::kPriority}};
  enum_option("--scheduling-policy", cfg.policy, policies, "fcfs or priority (lower priority value runs first)");
  const std::map<std::string, PreemptionMode> modes{{"recompute", PreemptionMode::kRecompute},
                                                    {"swap", PreemptionMode::kSwap}};
  enum_option("--preemption-mode", cfg.preemption, modes, "recompute or swap (needs --swap-space)");
  const std::map<std::string, DeviceKind> devices{
      {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}, {"auto", DeviceKind::kAuto}};
  enum_option("--device", cfg.runner.device, devices,
              "auto (default: cuda when a GPU is usable, else cpu), cuda or cpu");
  app.add_option("--threads", cfg.runner.n_threads, "CPU threads (0 = all cores; steps too small to split run on one)")
      ->check(CLI::Range(0, 4096))->capture_default_str()->group(g);
  app.add_option("--tensor-parallel-size", cfg.runner.tensor_parallel_size,
                 "(-tp) shards of the model: on the CPU, N shards in this process, one worker thread each, --threads "
                 "divided among them; CUDA: GPUs 0 .. N-1, one shard each (docs/tensor_parallel.md)")
      ->check(CLI::Range(1, 64))->capture_default_str()->group(g);
  const std::map<std::string, ComputeDtype> dtypes{{"auto", ComputeDtype::kAuto},
                                                   {"float32", ComputeDtype::kFloat32},
                                                   {"float", ComputeDtype::kFloat32},
                                                   {"bfloat16", ComputeDtype::kBFloat16}};
  const std::string no_fp16 = "float16 compute is not implemented; use bfloat16 (same memory, wider range) or auto";
  enum_option("--dtype", cfg.runner.dtype, dtypes,
              "CUDA compute precision: auto (float32 for F32 checkpoints, else bfloat16), float32 or bfloat16",
              {{"half", no_fp16}, {"float16", no_fp16}, {"fp16", no_fp16}});
  const std::string no_fp8 = "this fp8 variant is not implemented; fp8 (= fp8_e4m3) is, on CUDA";
  enum_option("--kv-cache-dtype", cfg.runner.kv_cache_dtype, kv_cache_dtype_spellings(),
              "KV cache element type. CPU: auto (fp16), fp16 (values rounded to fp16) or fp32 (twice the memory). "
              "CUDA: auto (the compute dtype) or fp8 (= fp8_e4m3: E4M3 with per-head scales, half the bytes of "
              "bf16; needs --dtype bfloat16)",
              {{"fp8_e5m2", no_fp8}, {"fp8_inc", no_fp8},
               {"bfloat16", "a bfloat16 KV cache is not a choice: auto is the compute dtype (bfloat16 on CUDA)"}});
  app.add_option_function<std::string>(
         "--speculative-config",
         [&cfg](const std::string& text) {
           auto c = parse_speculative_config(text);
           if (!c) throw CLI::ValidationError(c.message());  // the message names the flag
           cfg.speculative = c.value();
         },
         "speculative decoding, vLLM's JSON, e.g. '{\"method\":\"ngram\",\"num_speculative_tokens\":4,"
         "\"prompt_lookup_max\":4,\"prompt_lookup_min\":1}' (n-gram prompt lookup) or "
         "'{\"model\":\"DRAFT\",\"num_speculative_tokens\":4}' (a draft model); docs/speculative.md")
      ->group(g);
  app.add_flag("--enforce-eager", cfg.runner.enforce_eager, "CUDA: do not capture CUDA graphs")->group(g);
  app.add_flag_callback("--no-plan-cache", [&cfg] { cfg.runner.plan_cache = false; },
                        "CUDA: neither read nor write the plan cache (tuned GEMM plans, kept in "
                        "$XDG_CACHE_HOME/mopt or ~/.cache/mopt); the CPU backend has no plans to cache")->group(g);
  app.add_option("--plan-cache-dir", cfg.runner.plan_cache_dir,
                 "CUDA: directory of the plan cache (default $XDG_CACHE_HOME/mopt, else ~/.cache/mopt)")->group(g);
}

}  // namespace mopt
