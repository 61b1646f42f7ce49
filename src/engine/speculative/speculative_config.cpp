// SpeculativeConfig names and validation (the engine's side; the JSON of --speculative-config is read in
// server/speculative_config.cpp).
#include "core/strfmt.h"
#include "engine/engine.h"

namespace mopt {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraftModel: return "draft_model";
  }
  return "unknown";
}

std::string validate_speculative_config(const SpeculativeConfig& c) {
  constexpr int kMaxLookup = 1024;
  if (c.method == SpecMethod::kNone) return {};
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > kMaxSpecTokens)
    return strfmt("num_speculative_tokens must be in [1, %d], got %d", kMaxSpecTokens, c.num_speculative_tokens);
  if (c.disable_by_batch_size < 0)
    return strfmt("disable_by_batch_size must be >= 1 (or absent), got %d", c.disable_by_batch_size);
  if (c.method == SpecMethod::kDraftModel) {
    if (c.model.empty() && !c.draft) return "method draft_model needs \"model\" (the draft model's path)";
    if (c.prompt_lookup_min != 0 || c.prompt_lookup_max != 0)
      return "prompt_lookup_min / prompt_lookup_max are n-gram settings; method draft_model takes none";
    return {};
  }
  if (c.prompt_lookup_min < 1 || c.prompt_lookup_min > kMaxLookup)
    return strfmt("prompt_lookup_min must be in [1, %d], got %d", kMaxLookup, c.prompt_lookup_min);
  if (c.prompt_lookup_max < c.prompt_lookup_min || c.prompt_lookup_max > kMaxLookup)
    return strfmt("prompt_lookup_max must be in [prompt_lookup_min = %d, %d], got %d", c.prompt_lookup_min,
                  kMaxLookup, c.prompt_lookup_max);
  return {};
}

}  // namespace mopt
