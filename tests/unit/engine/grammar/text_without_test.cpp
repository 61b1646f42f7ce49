// "Any text without the marker" (text_without.h): on random strings of the marker's characters and others, with
// near misses and whole markers inserted, a whole text of the grammar exactly when std::string::find finds no marker
// (and, with the marker, not even a prefix of one). ASCII and multi-byte markers.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "engine/grammar/text_without.h"
#include "tokenizer/unicode.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::grammar {
namespace {

using testing::byte_vocab;
using testing::classify;

std::shared_ptr<CompiledGrammar> compile_or_die_grammar(const Grammar& g) {
  auto c = CompiledGrammar::compile(g, byte_vocab());
  EXPECT_TRUE(c) << c.message() << "\n" << print_gbnf(g);
  return c ? *c : nullptr;
}

TEST(TextWithout, AcceptsExactlyTheTextsWithoutTheMarker) {
  for (const std::string marker : {"</think>", "aab", "<tool_call>", "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>"}) {
    Grammar g;
    g.rules = text_without(marker, "t");
    g.rules.push_back({"root", Expr::ref("t0")});
    auto cg = compile_or_die_grammar(g);
    ASSERT_TRUE(cg);
    std::vector<std::string> units;  // the marker's characters
    for (size_t i = 0; i < marker.size();) {
      const size_t n = std::max<size_t>(uni::decode(marker, i).len, 1);
      units.push_back(marker.substr(i, n));
      i += n;
    }
    std::vector<std::string> alphabet = units;
    alphabet.push_back("x");
    alphabet.push_back("\u00E9");
    Xoshiro256 rng(marker.size());
    int with = 0;
    for (int i = 0; i < 3000; ++i) {
      std::vector<std::string> chars;  // whole characters, so the text stays valid UTF-8
      const int n = static_cast<int>(rng.next() % 14);
      for (int k = 0; k < n; ++k) chars.push_back(alphabet[rng.next() % alphabet.size()]);
      const uint64_t r = rng.next() % 8;  // near misses (the marker less its last one or two characters), markers
      if (r <= 2) {
        std::string piece;
        for (size_t k = 0; k + (r < 2 ? 1 + r : 0) < units.size(); ++k) piece += units[k];
        chars.insert(chars.begin() + static_cast<std::ptrdiff_t>(rng.next() % (chars.size() + 1)), piece);
      }
      std::string s;
      for (const std::string& c : chars) s += c;
      const bool has = s.find(marker) != std::string::npos;
      with += has;
      // every text without the marker is a whole text; one with it is not even a prefix of one
      EXPECT_EQ(classify(*cg, s), has ? -1 : 1) << marker << ": '" << s << "'";
    }
    EXPECT_GT(with, 50) << marker;
  }
}

}  // namespace
}  // namespace mopt::grammar
