// Tokenizer data loaders: GGUF metadata (tokenizer.ggml.*), a Hugging Face folder (tokenizer.json +
// tokenizer_config.json + config.json / generation_config.json) and a llama2.c tokenizer .bin.
// They produce a VocabData (tokenizer/vocab.h) that has passed validate_vocab(); the Tokenizer is built from it.
// Lives in mopt_model so the model loaders can call it; it does not depend on mopt_tokenizer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gguf.h"
#include "tokenizer/vocab.h"

namespace mopt {

Result<VocabData> vocab_from_gguf(const gguf::File& file);

// `dir` holds tokenizer.json (required), tokenizer_config.json, config.json, generation_config.json (optional).
Result<VocabData> vocab_from_hf_dir(const std::string& dir);
// The same from file contents (empty string = file absent); `name` prefixes error messages.
Result<VocabData> vocab_from_hf_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                     std::string_view config_json, std::string_view generation_config_json,
                                     const std::string& name);

// llama2.c tokenizer (tokenizer.bin / tok512.bin): int32 max_token_length, then per token:
// float32 score, int32 length, bytes. ids 0 <unk>, 1 <s>, 2 </s>; byte tokens "<0xNN>"; spaces stored as ' '.
Result<VocabData> vocab_from_llama2c(const std::string& path);
Result<VocabData> vocab_from_llama2c_bytes(std::string_view data, const std::string& name);

// Checks a VocabData: non-empty vocab, array sizes agree, every special/eog id in range, BPE merges name
// known tokens whose concatenation is a token (skipped with check_merges=false: the BPE tokenizer checks them
// while indexing them). Errors say which entry is wrong.
Status validate_vocab(const VocabData& v, bool check_merges = true);

// Adds eos/eot and the usual end-of-turn control tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, ...) to
// eog_ids (sorted, unique).
void fill_eog_ids(VocabData& v);

// The pre-tokenizer regexes (Hugging Face / PCRE syntax, applied in sequence) of a built-in `pre` name;
// nullptr for unknown names.
const std::vector<std::string>* builtin_pre_regexes(std::string_view pre);
// The built-in name whose regexes equal `regexes` exactly, or "" if none.
std::string builtin_pre_name(const std::vector<std::string>& regexes);

}  // namespace mopt
