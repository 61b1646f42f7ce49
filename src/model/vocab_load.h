// Tokenizer data loaders: GGUF metadata (tokenizer.ggml.*), a Hugging Face folder (tokenizer.json +
// tokenizer_config.json + config.json / generation_config.json) and a llama2.c tokenizer .bin.
// They produce a VocabData (tokenizer/vocab.h) that has passed validate_vocab(); the Tokenizer is built from it.
// Reading a model file's tokenizer section is the model loaders' concern; what a vocab is (and its checks) is the
// tokenizer's.
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

}  // namespace mopt
