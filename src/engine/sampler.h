// Sampler: turns one row of logits into the next token under a request's SamplingParams.
//
// Order: logprobs of the raw logits (as vLLM v1 reports them by default) -> grammar mask -> banned ids (min_tokens) ->
// repetition penalty over prompt + output (HF/llama.cpp: positive logits divided, negative multiplied) ->
// presence / frequency penalties over the output (OpenAI) -> greedy argmax when temperature == 0, else
// temperature -> top-k -> top-p -> min-p -> draw from the renormalized distribution with the request's own RNG
// (so a seeded request reproduces regardless of what else is in the batch).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"

namespace mopt {

// Per-request random stream: splitmix64-seeded xoshiro256** (fixed algorithm, so seeds reproduce everywhere).
using SamplerRng = Xoshiro256;

struct SampleResult {
  int32_t token = -1;
  float logprob = 0;                 // raw log-softmax of the chosen token (filled when want_logprobs)
  std::vector<TokenLogprob> top;     // [n_top] best raw alternatives, most likely first
};

// Log-softmax of a row of raw logits, accumulated in double: out [n_vocab] (resized).
void log_softmax(std::span<const float> logits, std::vector<float>& out);
// The k best entries of a row of logprobs, most likely first, lower id first on ties (k clamped to the row).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logprobs, int k);

// Returns why the parameters are unusable for a vocabulary of n_vocab tokens, or "" if they are fine.
std::string validate_sampling_params(const SamplingParams& p, int n_vocab);

// logits: [n_vocab], modified in place. banned: ids that must not be drawn (EOS before min_tokens). allowed: a
// grammar's mask ([ceil(n_vocab / 64)] bits, bit t%64 of word t/64; empty = every id): the other ids are not drawn.
// prompt / output: the request's tokens so far (penalties). Must leave at least one id allowed.
SampleResult sample_token(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, std::span<const int32_t> banned, SamplerRng& rng,
                          std::span<const uint64_t> allowed = {});

// Sets the logits of the ids whose bit in `allowed` is clear to -inf.
void apply_token_mask(std::span<float> logits, std::span<const uint64_t> allowed);

}  // namespace mopt
