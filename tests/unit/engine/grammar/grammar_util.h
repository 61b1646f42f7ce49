// Helpers of the grammar tests: a vocabulary of the 256 single bytes (id = byte) plus an end-of-generation id 256,
// and whole-text checks through a Matcher over it.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/matcher.h"

namespace mopt::grammar::testing {

constexpr int32_t kByteEos = 256;

inline std::shared_ptr<const TokenVocab> byte_vocab() {
  static auto v = [] {
    std::vector<std::string> bytes(257);
    for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
    return TokenVocab::build(std::move(bytes), {kByteEos});
  }();
  return v;
}

inline std::shared_ptr<CompiledGrammar> compile_or_die(std::string_view gbnf,
                                                       std::shared_ptr<const TokenVocab> v = byte_vocab()) {
  auto g = CompiledGrammar::from_gbnf(gbnf, std::move(v));
  EXPECT_TRUE(g) << g.message() << "\n" << gbnf;
  return g ? *g : nullptr;
}

// 1: the text is a whole text of the grammar; 0: a proper prefix of one; -1: neither.
inline int classify(CompiledGrammar& g, std::string_view text) {
  Matcher m(std::shared_ptr<CompiledGrammar>(&g, [](CompiledGrammar*) {}));
  for (unsigned char c : text)
    if (!m.accept(c)) return -1;
  return m.accepting() ? 1 : 0;
}

inline bool matches(CompiledGrammar& g, std::string_view text) { return classify(g, text) == 1; }

}  // namespace mopt::grammar::testing
