// SpeculativeConfig names and validation (the engine's side; the JSON of --speculative-config is read in
// server/speculative_config.cpp).
#include "core/strfmt.h"
#include "engine/engine.h"

namespace mopt {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
  }
  return "unknown";
}

std::string validate_speculative_config(const SpeculativeConfig& c) {
  constexpr int kMaxLookup = 1024;
  switch (c.method) {
    case SpecMethod::kNone: return {};
    case SpecMethod::kNgram: break;
  }
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > kMaxSpecTokens)
    return strfmt("num_speculative_tokens must be in [1, %d], got %d", kMaxSpecTokens, c.num_speculative_tokens);
  if (c.prompt_lookup_min < 1 || c.prompt_lookup_min > kMaxLookup)
    return strfmt("prompt_lookup_min must be in [1, %d], got %d", kMaxLookup, c.prompt_lookup_min);
  if (c.prompt_lookup_max < c.prompt_lookup_min || c.prompt_lookup_max > kMaxLookup)
    return strfmt("prompt_lookup_max must be in [prompt_lookup_min = %d, %d], got %d", c.prompt_lookup_min,
                  kMaxLookup, c.prompt_lookup_max);
  return {};
}

}  // namespace mopt
