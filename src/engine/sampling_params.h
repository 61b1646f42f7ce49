// Per-request sampling parameters (OpenAI / vLLM semantics).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mopt {

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;                   // 0 = off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f; // >1 discourages tokens seen in prompt or output (llama.cpp/HF style)
  float presence_penalty = 0.0f;   // OpenAI: subtract if the token appeared in the output
  float frequency_penalty = 0.0f;  // OpenAI: subtract count * penalty
  std::optional<uint64_t> seed;    // reproducible sampling per request
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<std::string> stop;           // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;               // -1 = off; >=0: return chosen-token logprob and this many top alternatives
  // -1 = off; >= 0: the logprob of every prompt token after the first (given the tokens before it) and this many
  // top alternatives, in the first output (OpenAI completions echo + logprobs; vLLM's prompt_logprobs). Every
  // prompt position is then computed (no prefix-cache hits for this request).
  int prompt_logprobs = -1;
  bool skip_special_tokens = true; // false: control tokens' text appears in the output (vLLM's flag)
};

}  // namespace mopt
