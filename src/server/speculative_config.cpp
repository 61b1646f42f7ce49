#include "server/speculative_config.h"

#include <nlohmann/json.hpp>

#include <limits>

namespace mopt {

namespace {

using json = nlohmann::json;

Result<int> int_field(const json& j, const char* name) {
  const json& v = j.at(name);
  if (!v.is_number_integer()) return error("--speculative-config: \"%s\" must be an integer", name);
  const int64_t x = v.get<int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    return error("--speculative-config: \"%s\" is out of range", name);
  return static_cast<int>(x);
}

}  // namespace

Result<SpeculativeConfig> parse_speculative_config(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const std::exception& e) {
    return error("--speculative-config is not valid JSON (%s); e.g. "
                 "'{\"method\":\"ngram\",\"num_speculative_tokens\":4,\"prompt_lookup_max\":4}'", e.what());
  }
  if (!j.is_object()) return error("--speculative-config must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key == "method" || key == "num_speculative_tokens" || key == "prompt_lookup_max" ||
        key == "prompt_lookup_min" || key == "model" || key == "draft_tensor_parallel_size" ||
        key == "disable_by_batch_size")
      continue;
    return error("--speculative-config: field \"%s\" is not supported; mopt reads method, "
                 "num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, model, "
                 "draft_tensor_parallel_size and disable_by_batch_size", key.c_str());
  }
  // As in vLLM, a "model" without a method is a draft model, except "ngram" / "[ngram]" (vLLM's older spelling of
  // prompt lookup), which stands for method "ngram".
  const std::string model = j.contains("model") && j["model"].is_string() ? j["model"].get<std::string>() : "";
  const bool ngram_model = model == "ngram" || model == "[ngram]";
  std::string method = j.contains("model") && !j.contains("method") ? (ngram_model ? "ngram" : "draft_model") : "";
  if (method.empty()) {
    if (!j.contains("method"))
      return error("--speculative-config needs \"method\" (mopt implements \"ngram\" and \"draft_model\")");
    if (!j["method"].is_string()) return error("--speculative-config: \"method\" must be a string");
    method = j["method"].get<std::string>();
  }
  if (method == "eagle" || method == "eagle3" || method == "medusa" || method == "mlp_speculator" ||
      method == "mtp")
    return error("--speculative-config: method \"%s\" is not implemented in mopt yet; use \"ngram\" (prompt "
                 "lookup, no second model) or \"draft_model\"", method.c_str());
  if (method != "ngram" && method != "draft_model")
    return error("--speculative-config: unknown method \"%s\"; mopt implements \"ngram\" and \"draft_model\"",
                 method.c_str());
  const bool has_max = j.contains("prompt_lookup_max"), has_min = j.contains("prompt_lookup_min");
  SpeculativeConfig c;
  if (method == "draft_model") {
    c.method = SpecMethod::kDraftModel;
    if (model.empty())
      return error("--speculative-config: method \"draft_model\" needs \"model\": the draft model's path (a "
                   "smaller model with the target's tokenizer)");
    c.model = model;
    if (has_max || has_min)
      return error("--speculative-config: prompt_lookup_max / prompt_lookup_min are n-gram settings; method "
                   "\"draft_model\" takes none");
    // The draft always runs unsharded (engine_create.cpp), vLLM's default for a draft model.
    if (j.contains("draft_tensor_parallel_size")) {
      MOPT_ASSIGN_OR_RETURN(const int tp, int_field(j, "draft_tensor_parallel_size"));
      if (tp != 1)
        return error("--speculative-config: draft_tensor_parallel_size %d: mopt runs the draft model unsharded "
                     "(1), on the target's first device", tp);
    }
  } else {
    c.method = SpecMethod::kNgram;
    if (j.contains("model") && !ngram_model)
      return error("--speculative-config: \"model\" names a draft model; method \"ngram\" takes none");
    if (j.contains("draft_tensor_parallel_size"))
      return error("--speculative-config: draft_tensor_parallel_size is a draft model's setting; method \"ngram\" "
                   "has no second model");
  }
  if (!j.contains("num_speculative_tokens"))
    return error("--speculative-config needs \"num_speculative_tokens\" (tokens proposed per step, e.g. 4)");
  MOPT_ASSIGN_OR_RETURN(c.num_speculative_tokens, int_field(j, "num_speculative_tokens"));
  if (j.contains("disable_by_batch_size") && !j["disable_by_batch_size"].is_null()) {
    MOPT_ASSIGN_OR_RETURN(c.disable_by_batch_size, int_field(j, "disable_by_batch_size"));
    if (c.disable_by_batch_size < 1)
      return error("--speculative-config: disable_by_batch_size must be >= 1 (the running requests at which "
                   "proposals stop), got %d", c.disable_by_batch_size);
  }
  if (c.method == SpecMethod::kNgram) {
    if (has_max) {
      MOPT_ASSIGN_OR_RETURN(c.prompt_lookup_max, int_field(j, "prompt_lookup_max"));
    }
    if (has_min) {
      MOPT_ASSIGN_OR_RETURN(c.prompt_lookup_min, int_field(j, "prompt_lookup_min"));
    }
    if (!has_max && !has_min) c.prompt_lookup_max = c.prompt_lookup_min = 5;
    if (!has_min) c.prompt_lookup_min = c.prompt_lookup_max;
    if (!has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  }
  if (std::string e = validate_speculative_config(c); !e.empty()) return error("--speculative-config: %s", e.c_str());
  return c;
}

}  // namespace mopt
