// vLLM benchmark_serving's "random" dataset, with lengths in the served model's tokens: each prompt's input length
// is drawn uniformly from [L (1 - r), L (1 + r)] (L = --random-input-len, r = --random-range-ratio, 0 <= r < 1),
// and its output length (max_tokens) likewise from --random-output-len. Prompts are random words, sized by the
// server's tokenizer (POST /tokenize), with one-token filler words for the last few tokens so that it counts
// exactly the drawn length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/workload.h"

namespace mopt::loadgen {

// The [low, high] range lengths are drawn from (low >= 1); bad options are errors naming the flag.
Result<std::pair<int, int>> random_length_range(int len, double range_ratio, const char* flag);

// num_prompts prompts; an item's expected_prompt_tokens is what `count` gave for it: the drawn length, unless the
// tokenizer has no one-token filler word ("a", "I", "0", "x", ".") to reach it with, then the nearest below.
Result<std::vector<WorkItem>> random_prompts(const RandomDatasetOptions& o, const TokenCounter& count);

// Counts through POST {base}/tokenize of the server at host:port ({"model", "prompt"} -> {"count"}).
TokenCounter server_token_counter(std::string host, int port, std::string base, std::string model);

}  // namespace mopt::loadgen
