#include "cli/vllm_serve_flags.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "model/hf_quant.h"

namespace mopt::cli {

void add_vllm_serve_flags(CLI::App* cmd, VllmServeFlags& f) {
  const std::string g = "vLLM spellings";
  cmd->add_option("model_path", f.positional_model, "the model, as `vllm serve MODEL` takes it (same as -m)")
      ->group(g);
  cmd->add_option("--pipeline-parallel-size", f.pipeline_parallel, "(-pp) pipeline stages (only 1)")
      ->check(CLI::PositiveNumber)->group(g);
  cmd->add_option("-q,--quantization", f.quantization,
                  "the model's quantization method (gguf, fp8, awq, compressed-tensors); checked against the model "
                  "(mopt does not quantize on load: use mopt quantize)")->group(g);
  cmd->add_option("--seed", f.seed, "seed of the per-request seeds of requests without one (default: random)")
      ->check(CLI::NonNegativeNumber)->group(g);
  cmd->add_option("--generation-config", f.generation_config,
                  "vllm: sampling defaults are the API's, not the model's generation_config.json (mopt's behaviour)")
      ->group(g);
  cmd->add_flag_callback("--enable-auto-tool-choice", [] {},
                         "tool calls are parsed into tool_calls (always on in mopt)")->group(g);
  cmd->add_flag_callback("--trust-remote-code", [] {},
                         "accepted: mopt runs no code from a model folder, so there is nothing to allow")->group(g);
  cmd->add_flag_callback("--disable-log-requests", [&f] { f.log_requests = false; },
                         "no access-log line per request")->group(g);
  cmd->add_flag_callback("--enable-log-requests", [&f] { f.log_requests = true; },
                         "one access-log line per request (the default)")->group(g);
  cmd->add_flag_callback("--disable-log-stats", [&f] { f.log_stats = false; },
                         "no periodic engine-stats line (tokens/s, queue, KV cache use)")->group(g);
}

std::vector<std::string> expand_vllm_short_flags(std::vector<std::string> args) {
  static const std::pair<const char*, const char*> kShort[] = {{"-tp", "--tensor-parallel-size"},
                                                               {"-pp", "--pipeline-parallel-size"}};
  for (std::string& a : args)
    for (const auto& [s, l] : kShort) {
      const size_t n = std::strlen(s);
      if (a.compare(0, n, s) == 0 && (a.size() == n || a[n] == '=')) a = l + a.substr(n);
    }
  return args;
}

Result<std::string> model_quantization_method(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::ifstream in(fs::path(path) / "config.json");
    if (!in) return std::string();  // the loader names what is missing
    nlohmann::json cfg = nlohmann::json::parse(in, nullptr, false);
    if (cfg.is_discarded()) return std::string();
    MOPT_ASSIGN_OR_RETURN(HfQuantConfig qc, parse_hf_quant_config(cfg));
    return qc.layout == HfQuantLayout::kNone ? std::string() : qc.method;
  }
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0) return std::string("gguf");
  return std::string();
}

Status resolve_vllm_serve_flags(const VllmServeFlags& f, ModelArgs& model, EngineConfig& engine) {
  if (!f.positional_model.empty()) {
    if (!model.model.empty() && model.model != f.positional_model)
      return error("two models given: '%s' (positional) and '%s' (--model); give one", f.positional_model.c_str(),
                   model.model.c_str());
    model.model = f.positional_model;
  }
  if (f.pipeline_parallel != 1)
    return error("--pipeline-parallel-size %d: mopt has no pipeline parallelism; use --tensor-parallel-size, or run "
                 "one server per GPU behind a load balancer", f.pipeline_parallel);
  if (f.seed >= 0) engine.seed = static_cast<uint64_t>(f.seed);
  if (!f.generation_config.empty() && f.generation_config != "vllm")
    return error("--generation-config %s: mopt does not take default sampling parameters from a model's "
                 "generation_config.json; requests get the API's defaults (as with --generation-config vllm). "
                 "Send temperature, top_p, ... in the requests, or pass --generation-config vllm",
                 f.generation_config.c_str());
  if (!f.quantization.empty() && !model.model.empty()) {  // no model: the caller says so next
    static const char* const kKnown[] = {"gguf", "fp8", "awq", "compressed-tensors"};
    bool known = false;
    for (const char* k : kKnown) known |= f.quantization == k;
    if (!known)
      return error("--quantization %s: mopt runs gguf, fp8, awq and compressed-tensors (FP8/INT8) checkpoints; "
                   "quantize the model with mopt quantize, and leave --quantization out (mopt reads the method from "
                   "the model)", f.quantization.c_str());
    MOPT_ASSIGN_OR_RETURN(std::string held, model_quantization_method(model.model));
    if (held != f.quantization)
      return error("--quantization %s, but the model %s; mopt does not quantize on load: write a quantized copy "
                   "with mopt quantize, or leave --quantization out",
                   f.quantization.c_str(),
                   held.empty() ? "is not quantized" : ("holds '" + held + "' weights").c_str());
  }
  return Status::ok();
}

}  // namespace mopt::cli
