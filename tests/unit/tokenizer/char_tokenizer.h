// A small SentencePiece-kind tokenizer for tests: <unk> (0), </s> (1, eos), <s> (2, bos), then one token per
// character of `chars`, then the `longer` pieces; no byte fallback: texts with other characters cannot be written.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "unit/tokenizer/char_vocab.h"

namespace mopt::test {

inline std::unique_ptr<Tokenizer> char_tokenizer(const std::string& chars, const std::vector<std::string>& longer = {}) {
  auto t = Tokenizer::create(char_vocab(chars, longer));
  EXPECT_TRUE(t) << t.message();
  return t ? std::move(t).value() : nullptr;
}

}  // namespace mopt::test
