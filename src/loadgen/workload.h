// Request workloads for mopt bench: synthetic prompts (lengths from distributions, optional shared prefixes
// for prefix-caching tests), vLLM's random dataset (lengths in the server's tokens, loadgen/random_prompts.h),
// ShareGPT-style conversation files, and plain prompt files (one prompt per line).
#pragma once

#include <cstdint>
#include <functional>
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

// --dataset random (vLLM benchmark_serving's flags).
struct RandomDatasetOptions {
  int input_len = 1024;      // --random-input-len, tokens
  int output_len = 128;      // --random-output-len, tokens
  double range_ratio = 0;    // --random-range-ratio: lengths uniform in [len (1 - r), len (1 + r)]
  int num_prompts = 1000;    // distinct prompts made (then reused in turn)
  uint64_t seed = 1;
};

// Tokens the server counts for a prompt text (as a completion request's usage.prompt_tokens would).
using TokenCounter = std::function<Result<int>(const std::string& text)>;

struct WorkloadOptions {
  enum class Kind { kSynthetic, kRandom, kShareGpt, kPromptFile };
  Kind kind = Kind::kSynthetic;
  std::string path;                                      // ShareGPT JSON or prompt file
  Distribution input_len = Distribution::fixed(128);     // synthetic: words per prompt (unique part)
  Distribution output_len = Distribution::fixed(128);    // max_tokens per request
  bool output_len_from_dataset = false;                  // ShareGPT: use the reference answer's length
  int shared_prefix_len = 0;                             // synthetic: words of a shared prefix (0 = none)
  int num_prefixes = 1;                                  // how many distinct shared prefixes
  RandomDatasetOptions random;                           // kRandom
  uint64_t seed = 1;
};

class Workload {
 public:
  // `count`: the server's token counts, which kRandom needs (unused by the other kinds).
  static Result<Workload> create(const WorkloadOptions& opts, const TokenCounter& count = {});
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
