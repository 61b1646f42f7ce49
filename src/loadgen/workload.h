// Request workloads for mopt bench: synthetic prompts (lengths from distributions, optional shared prefixes
// for prefix-caching tests), ShareGPT-style conversation files, and plain prompt files (one prompt per line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loadgen/stats.h"
#include "core/status.h"

namespace mopt::loadgen {

struct WorkItem {
  std::string prompt;
  int expected_prompt_tokens = 0;  // the workload's own estimate (synthetic: words; files: chars / 4)
  int max_tokens = 0;              // requested output length
};

struct WorkloadOptions {
  enum class Kind { kSynthetic, kShareGpt, kPromptFile };
  Kind kind = Kind::kSynthetic;
  std::string path;                                      // ShareGPT JSON or prompt file
  Distribution input_len = Distribution::fixed(128);     // synthetic: words per prompt (unique part)
  Distribution output_len = Distribution::fixed(128);    // max_tokens per request
  bool output_len_from_dataset = false;                  // ShareGPT: use the reference answer's length
  int shared_prefix_len = 0;                             // synthetic: words of a shared prefix (0 = none)
  int num_prefixes = 1;                                  // how many distinct shared prefixes
  uint64_t seed = 1;
};

class Workload {
 public:
  static Result<Workload> create(const WorkloadOptions& opts);
  // The next request (deterministic for a given seed and call sequence).
  WorkItem next();
  std::string describe() const;

 private:
  WorkloadOptions opts_;
  Rng rng_{1};
  std::vector<WorkItem> items_;       // file workloads (shuffled)
  size_t cursor_ = 0;
  std::vector<std::string> prefixes_;  // [num_prefixes] shared prefixes
};

// Words that most tokenizers encode as one token each (with a leading space).
extern const char* const kSyntheticWords[];
extern const size_t kNumSyntheticWords;

}  // namespace mopt::loadgen
