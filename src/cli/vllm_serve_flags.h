// vLLM's spellings of `vllm serve` flags that `mopt serve` has no flag of its own for (the ones it shares, e.g.
// --max-model-len, --max-num-seqs, --served-model-name, --api-key, are mopt's own flags). Each one either maps to
// what mopt does or is refused with the reason; none is accepted and ignored.
//
//   mopt serve MODEL                     positional model (as `vllm serve MODEL`); the same as -m MODEL
//   -tp N                                = --tensor-parallel-size N (an engine flag of run and serve)
//   -pp/--pipeline-parallel-size 1       no pipeline parallelism: 1 is accepted, more is refused
//   -q/--quantization METHOD             must name the method the model file holds (gguf, fp8, awq,
//                                        compressed-tensors); mopt does not quantize on load (use mopt quantize)
//   --seed N                             seeds the engine's stream of per-request seeds (EngineConfig::seed)
//   --generation-config vllm             sampling defaults are OpenAI's, not generation_config.json's; "auto" and
//                                        folders (taking the model's defaults) are refused
//   --enable-auto-tool-choice            tool calls are always parsed (the default); accepted
//   --disable-log-requests               no access-log line per request (--enable-log-requests: the default)
//   --disable-log-stats                  no periodic engine-stats line
//   --trust-remote-code                  mopt runs no code from a model folder: nothing to allow; accepted
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/model_args.h"
#include "core/status.h"
#include "engine/engine.h"

namespace mopt::cli {

struct VllmServeFlags {
  std::string positional_model;
  int pipeline_parallel = 1;
  std::string quantization;
  std::string generation_config;
  int64_t seed = -1;  // -1: not given
  bool log_requests = true;
  bool log_stats = true;
};

void add_vllm_serve_flags(CLI::App* cmd, VllmServeFlags& f);

// vLLM's two-letter single-dash flags, which CLI11 cannot declare: "-tp" / "-tp=N" -> "--tensor-parallel-size",
// "-pp" -> "--pipeline-parallel-size". main() applies it to the arguments of `mopt serve` and `mopt run`.
std::vector<std::string> expand_vllm_short_flags(std::vector<std::string> args);

// After parsing (and the config file): the positional model into `model`, the seed into `engine`, and every value
// mopt cannot honour refused with what to do instead.
Status resolve_vllm_serve_flags(const VllmServeFlags& f, ModelArgs& model, EngineConfig& engine);

// The quantization method the model at `path` holds: "gguf" for a GGUF file, a Hugging Face folder's
// quantization_config.quant_method, "" when it is not quantized.
Result<std::string> model_quantization_method(const std::string& path);

}  // namespace mopt::cli
