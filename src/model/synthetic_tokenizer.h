// The tokenizer files of a random-weight checkpoint (mopt synth): a GPT-2 style byte-level BPE tokenizer.json with
// exactly n_vocab ids, so that every id a random model samples decodes to text (an id without text would stream
// nothing, and the client would see the token late). Layout:
//   ids 0..255        the 256 byte tokens;
//   then              the merge chains that make each given word one token, with a leading space (" the") and
//                     without ("the"), as a real English tokenizer does for common words;
//   bos_id, eos_id    <|begin_of_text|>, <|end_of_text|> (special);
//   every other id    a filler token " t<id>" that no text encodes to.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace mopt {

struct TokenizerFiles {
  std::string tokenizer_json, tokenizer_config_json;
};

// How many ids the byte and word tokens take (the first id free for specials and fillers).
int synthetic_text_tokens(const std::vector<std::string>& words);

Result<TokenizerFiles> synthetic_tokenizer(int n_vocab, const std::vector<std::string>& words, int bos_id,
                                           int eos_id);

}  // namespace mopt
