// A small SentencePiece-kind tokenizer for tests: <unk> (0), </s> (1, eos), <s> (2, bos), then one token per
// character of `chars`, then the `longer` pieces; no byte fallback: texts with other characters cannot be written.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace mopt::test {

inline std::unique_ptr<Tokenizer> char_tokenizer(const std::string& chars, const std::vector<std::string>& longer = {}) {
  VocabData v;
  v.kind = TokenizerKind::kSpm;
  v.add_space_prefix = false;
  v.byte_fallback = false;
  v.tokens = {"<unk>", "</s>", "<s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (char c : chars) {
    v.tokens.push_back(std::string(1, c));
    v.types.push_back(TokenType::kNormal);
  }
  for (const std::string& p : longer) {
    v.tokens.push_back(p);
    v.types.push_back(TokenType::kNormal);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk = 0;
  v.eos = 1;
  v.bos = 2;
  fill_eog_ids(v);
  auto t = Tokenizer::create(v);
  EXPECT_TRUE(t) << t.message();
  return t ? std::move(t).value() : nullptr;
}

}  // namespace mopt::test
