// The echoed prompt's entries of a completions `logprobs` object (echo + logprobs; lm-evaluation-harness scores
// texts this way): one entry per prompt token, the first with null logprob and alternatives (nothing precedes
// it), token i > 0 with the logprob of ids[i] given ids[0..i) and the best alternatives, as the engine computed
// them (RequestOutput::prompt_logprobs / prompt_top_logprobs, in a request's first output).
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine.h"
#include "server/openai.h"
#include "tokenizer/tokenizer.h"

namespace mopt::server {

// Appends the entries to dst's "tokens", "token_logprobs", "top_logprobs" and "text_offset" arrays. Tokens are
// their bytes (token_bytes); offsets are those of each token's text in decode(ids) (control tokens are empty
// there, and a leading space that decode drops is not counted). Returns the offset after the last token.
int append_prompt_logprobs(const Tokenizer& tok, std::span<const int32_t> ids, const RequestOutput& first_output,
                           json& dst);

}  // namespace mopt::server
