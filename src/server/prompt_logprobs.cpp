#include "server/prompt_logprobs.h"

#include <string>

namespace mopt::server {

int append_prompt_logprobs(const Tokenizer& tok, std::span<const int32_t> ids, const RequestOutput& o, json& dst) {
  const bool strip = tok.strips_leading_space();
  bool first_text = true;
  int offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    dst["tokens"].push_back(tok.token_bytes(ids[i]));
    // Row i - 1 predicted token i; the engine gives prompt size - 1 rows (none for the first token).
    const bool scored = i > 0 && i - 1 < o.prompt_logprobs.size();
    if (scored) {
      dst["token_logprobs"].push_back(o.prompt_logprobs[i - 1].logprob);
      json top = json::object();
      if (i - 1 < o.prompt_top_logprobs.size())
        for (const TokenLogprob& alt : o.prompt_top_logprobs[i - 1]) top[tok.token_bytes(alt.id)] = alt.logprob;
      dst["top_logprobs"].push_back(std::move(top));
    } else {
      dst["token_logprobs"].push_back(nullptr);
      dst["top_logprobs"].push_back(nullptr);
    }
    dst["text_offset"].push_back(offset);
    std::string piece = tok.piece(ids[i]);
    if (first_text && !piece.empty()) {
      first_text = false;
      if (strip && piece[0] == ' ') piece.erase(0, 1);
    }
    offset += static_cast<int>(piece.size());
  }
  return offset;
}

}  // namespace mopt::server
