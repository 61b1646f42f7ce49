// Token masks against brute force: for random grammars and random vocabularies (multi-byte tokens, tokens that
// split UTF-8 characters, an end-of-generation id), at every step of random walks the allowed set equals
// { t : prefix + bytes(t) is a viable prefix } (plus EOG where the text is complete), as decided by an independent
// recognizer on the expression tree (recognizer.h).
#include <gtest/gtest.h>

#include "core/rng.h"
#include "engine/grammar/matcher.h"
#include "unit/engine/grammar/grammar_util.h"
#include "unit/engine/grammar/random_grammar.h"
#include "unit/engine/grammar/recognizer.h"

namespace mopt::grammar {
namespace {

using testing::kChars;
using testing::RandomGrammar;
using testing::Recognizer;

// Tokens: every single character, its bytes one by one (splitting é and €), runs of one character, random 2-3
// character strings, a character followed by the first byte of another, and an end-of-generation id (last).
std::shared_ptr<const TokenVocab> random_vocab(uint64_t seed) {
  Xoshiro256 rng(seed);
  std::vector<std::string> t;
  for (const char* c : kChars) {
    t.push_back(c);
    if (std::string(c).size() > 1)
      for (char b : std::string(c)) t.push_back(std::string(1, b));
  }
  for (const char* c : kChars) {  // runs of one character: whole trie subtrees inside a character loop
    t.push_back(std::string(c) + c);
    t.push_back(std::string(c) + c + c);
  }
  for (int i = 0; i < 24; ++i) {
    std::string s;
    const int n = 2 + static_cast<int>(rng.next() % 2);
    for (int k = 0; k < n; ++k) s += kChars[rng.next() % 6];
    t.push_back(s);
  }
  t.push_back(std::string(kChars[rng.next() % 6]) + "\xE2");
  t.push_back("z");  // never allowed
  t.push_back("");   // adds no bytes: never allowed
  t.push_back("");   // end of generation
  const int32_t eos = static_cast<int32_t>(t.size()) - 1;
  return TokenVocab::build(std::move(t), {eos});
}

TEST(Matcher, MasksEqualBruteForceOnRandomGrammars) {
  int checked_steps = 0, allowed_total = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    RandomGrammar gen(seed);
    Grammar g = gen.make();
    auto vocab = random_vocab(seed * 31);
    auto cg = CompiledGrammar::compile(g, vocab);
    ASSERT_TRUE(cg) << cg.message() << "\n" << print_gbnf(g);
    Recognizer rec(g);
    Xoshiro256 rng(seed);
    for (int walk = 0; walk < 4; ++walk) {
      Matcher m(*cg);
      std::string prefix;
      for (int step = 0; step < 12; ++step) {
        const TokenMask& mask = m.allowed();
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->n_vocab(); ++t) {
          bool want;
          if (vocab->is_eog(t)) {
            want = rec.accepts(prefix);
          } else {
            want = !vocab->bytes(t).empty() && rec.viable(prefix + vocab->bytes(t));
          }
          ASSERT_EQ(mask.allows(t), want) << "grammar\n" << print_gbnf(g) << "prefix '" << prefix << "' token '"
                                          << vocab->bytes(t) << "' (" << t << ")";
          if (want) allowed.push_back(t);
        }
        ASSERT_EQ(mask.n_allowed, static_cast<int>(allowed.size()));
        EXPECT_EQ(m.accepting(), rec.accepts(prefix));
        ++checked_steps;
        allowed_total += static_cast<int>(allowed.size());
        if (allowed.empty()) break;
        const int32_t t = allowed[rng.next() % allowed.size()];
        if (vocab->is_eog(t)) break;
        ASSERT_TRUE(m.accept(t));
        prefix += vocab->bytes(t);
        EXPECT_EQ(m.complete(), rec.accepts(prefix) && !rec.viable_continuation(prefix));
      }
    }
  }
  EXPECT_GT(checked_steps, 500);
  EXPECT_GT(allowed_total, checked_steps);  // the walks were not all trivial
}

TEST(Matcher, RefusedTokensLeaveTheStateAlone) {
  auto g = testing::compile_or_die("root ::= \"ab\" \"c\"*");
  Matcher m(g);
  EXPECT_FALSE(m.accept('b'));
  EXPECT_TRUE(m.accept('a'));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.accept(testing::kByteEos));  // end of generation only where the text may end
  EXPECT_TRUE(m.accept('b'));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.complete());  // "c"* may go on
  EXPECT_TRUE(m.allowed().allows(testing::kByteEos));
  EXPECT_TRUE(m.allowed().allows('c'));
  EXPECT_EQ(m.allowed().n_allowed, 2);
  auto fixed = testing::compile_or_die("root ::= \"ok\"");
  Matcher f(fixed);
  EXPECT_TRUE(f.accept('o'));
  EXPECT_TRUE(f.accept('k'));
  EXPECT_TRUE(f.complete());
}

TEST(Matcher, LeadingSpaceStrippedFirstToken) {
  // A request whose detokenizer drops the first piece's leading space: " ab" then behaves as "ab".
  auto v = TokenVocab::build({" ab", "ab", " ", "c", ""}, {4});
  auto g = CompiledGrammar::from_gbnf("root ::= \"abc\"", v);
  ASSERT_TRUE(g) << g.message();
  Matcher m(*g, /*strip_leading_space=*/true);
  const TokenMask& first = m.allowed();
  EXPECT_TRUE(first.allows(0));
  EXPECT_TRUE(first.allows(1));
  EXPECT_FALSE(first.allows(2));  // would add no text
  ASSERT_TRUE(m.accept(0));
  EXPECT_FALSE(m.allowed().allows(0));  // only the first token is stripped
  EXPECT_TRUE(m.accept(3));
  EXPECT_TRUE(m.complete());
}

TEST(Matcher, VocabularyThatCannotBeginTheOutputIsRefused) {
  // Tokens only of letters: a grammar that must start with '{' cannot be produced.
  auto v = TokenVocab::build({"a", "b", "ab", ""}, {3});
  auto g = CompiledGrammar::from_gbnf("root ::= \"{\" [a-b]* \"}\"", v);
  ASSERT_FALSE(g);
  EXPECT_NE(g.message().find("no token of this model's vocabulary can begin"), std::string::npos) << g.message();
}

TEST(Matcher, MasksAreSharedBetweenMatchers) {
  auto g = testing::compile_or_die("root ::= [a-z]+ \"!\"");
  Matcher a(g), b(g);
  for (char c : std::string("hello")) ASSERT_TRUE(a.accept(c));
  for (char c : std::string("world")) ASSERT_TRUE(b.accept(c));
  EXPECT_EQ(a.state(), b.state());  // one state inside the word: one cached mask
  EXPECT_EQ(&a.allowed(), &b.allowed());
  EXPECT_LE(g->n_states(), 4u);
}

}  // namespace
}  // namespace mopt::grammar
