// The vocabulary of a small SentencePiece-kind tokenizer, for tests (char_tokenizer.h) and fuzz targets (no
// GoogleTest here): <unk> (0), </s> (1, eos), <s> (2, bos), with byte_fallback the 256 byte tokens <0x00>..<0xFF>
// (then any text can be written), then one token per character of `chars`, then the `longer` pieces.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer/vocab.h"

namespace mopt::test {

inline VocabData char_vocab(const std::string& chars, const std::vector<std::string>& longer = {},
                            bool byte_fallback = false) {
  VocabData v;
  v.kind = TokenizerKind::kSpm;
  v.add_space_prefix = false;
  v.byte_fallback = byte_fallback;
  v.tokens = {"<unk>", "</s>", "<s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  const auto add = [&](std::string piece, TokenType type) {
    v.tokens.push_back(std::move(piece));
    v.types.push_back(type);
  };
  for (int b = 0; byte_fallback && b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, TokenType::kByte);
  }
  for (char c : chars) add(std::string(1, c), TokenType::kNormal);
  for (const std::string& p : longer) add(p, TokenType::kNormal);
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk = 0;
  v.eos = 1;
  v.bos = 2;
  fill_eog_ids(v);
  return v;
}

}  // namespace mopt::test
