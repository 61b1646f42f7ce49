// --speculative-config: vLLM's JSON object (method, num_speculative_tokens, prompt_lookup_max/min, model) read
// into the engine's SpeculativeConfig. Used by `mopt serve`, `mopt run` and the engine benchmarks.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/engine.h"

namespace mopt {

// Parses e.g. {"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1}.
// As in vLLM, a missing prompt_lookup_min / prompt_lookup_max takes the other's value, both missing: 5. Draft
// models (method "draft_model", or a "model" field) and fields mopt does not implement are refused with an error
// that says so; unknown fields too.
Result<SpeculativeConfig> parse_speculative_config(const std::string& json_text);

}  // namespace mopt
