// VocabData: tokenizer data as stored in a model file, independent of the algorithm.
// Filled from GGUF `tokenizer.ggml.*` metadata, a Hugging Face tokenizer.json (+ tokenizer_config.json),
// or a llama2.c tokenizer .bin by the readers in model/vocab_load.h. The Tokenizer (tokenizer.h) is built from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace mopt {

// Far above any real vocab; bounds allocations made from untrusted files.
constexpr int64_t kMaxVocab = 1 << 24;

enum class TokenizerKind { kNone, kSpm, kBpe, kWordPiece };
const char* tokenizer_kind_name(TokenizerKind k);  // "none", "spm", "bpe", "wordpiece"

// Token types as in GGUF (tokenizer.ggml.token_type).
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                                  kUnused = 5, kByte = 6 };

struct VocabData {
  TokenizerKind kind = TokenizerKind::kNone;
  std::string pre;                   // pre-tokenizer name ("default", "llama3", "qwen2", "gpt-2", "deepseek-llm", ...)
  // BPE: pre-tokenizer regexes applied in sequence (each splits the pieces of the previous one), used when
  // `pre` names no built-in set (e.g. an unknown regex from tokenizer.json); empty: the set `pre` names.
  std::vector<std::string> pre_regex;
  std::vector<std::string> tokens;   // [n_vocab] token text (SPM: with U+2581 for spaces; BPE: byte-level chars)
  std::vector<float> scores;         // [n_vocab] SPM merge scores (empty for BPE)
  std::vector<TokenType> types;      // [n_vocab]
  std::vector<std::string> merges;   // BPE merges "a b", in priority order
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, sep = -1, cls = -1, mask = -1, eot = -1;
  std::vector<int32_t> eog_ids;      // every id that ends generation (eos, eot, <|im_end|>, ...)
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;      // SPM: prepend a space (U+2581) to the text
  bool byte_fallback = true;         // SPM: unknown chars -> <0xNN> byte tokens
  bool ignore_merges = false;        // BPE: a pre-token that is itself a token is emitted whole (Llama-3)
};

// Checks a VocabData: non-empty vocab, array sizes agree, every special/eog id in range, BPE merges name
// known tokens whose concatenation is a token (skipped with check_merges=false: the BPE tokenizer checks them
// while indexing them). Errors say which entry is wrong.
Status validate_vocab(const VocabData& v, bool check_merges = true);

// Adds eos/eot and the usual end-of-turn control tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, ...) to
// eog_ids (sorted, unique).
void fill_eog_ids(VocabData& v);

}  // namespace mopt
