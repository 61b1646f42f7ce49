// Whether a vocabulary's bytes can write a complete text of a grammar (vocab_check.h): bytes_can_finish against a
// breadth-first search over byte strings decided by the independent recognizer, on random grammars and random byte
// sets; and CompiledGrammar::compile refusing a grammar whose every text needs a byte no token has.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/vocab_check.h"
#include "unit/engine/grammar/random_grammar.h"
#include "unit/engine/grammar/recognizer.h"

namespace mopt::grammar {
namespace {

using testing::kChars;
using testing::RandomGrammar;
using testing::Recognizer;

ByteSet set_of(const std::string& bytes) {
  ByteSet s{};
  for (unsigned char b : bytes) s[b >> 6] |= uint64_t{1} << (b & 63);
  return s;
}

// 1: some complete text uses only `bytes`; 0: none does (no viable prefix is left); -1: undecided within the bound.
int brute_force(Recognizer& rec, const std::string& bytes) {
  std::vector<std::string> frontier{""};
  for (int depth = 0; depth < 12 && !frontier.empty(); ++depth) {
    std::vector<std::string> next;
    for (const std::string& s : frontier)
      for (char b : bytes) {
        const std::string t = s + b;
        if (!rec.viable(t)) continue;
        if (rec.accepts(t)) return 1;
        if (next.size() < 400) next.push_back(t);
      }
    frontier = std::move(next);
  }
  return frontier.empty() ? 0 : -1;
}

TEST(VocabCheck, BytesCanFinishAgreesWithBruteForce) {
  std::string alphabet;  // every byte of the random grammars' characters
  for (const char* c : kChars) alphabet += c;
  int yes = 0, no = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    RandomGrammar gen(seed);
    Grammar g = gen.make();
    auto a = compile(g);
    ASSERT_TRUE(a) << a.message() << "\n" << print_gbnf(g);
    Recognizer rec(g);
    Xoshiro256 rng(seed * 7);
    for (int trial = 0; trial < 4; ++trial) {
      std::string bytes;
      for (char b : alphabet)
        if (rng.next() % 10 < 6) bytes += b;
      const int want = brute_force(rec, bytes);
      if (want < 0) continue;
      EXPECT_EQ(bytes_can_finish(*a, set_of(bytes)), want == 1) << print_gbnf(g) << "bytes " << bytes;
      (want == 1 ? yes : no)++;
    }
  }
  EXPECT_GT(yes, 50);  // both answers were checked often
  EXPECT_GT(no, 50);
}

TEST(VocabCheck, CompileRefusesAGrammarTheTokensCannotWrite) {
  // '~' is in no token: "a~" cannot be written, though "a" can begin it
  auto v = TokenVocab::build({"a", "b", "ab", ""}, {3});
  auto g = CompiledGrammar::from_gbnf("root ::= \"a\" \"~\"", v);
  ASSERT_FALSE(g);
  EXPECT_NE(g.message().find("no sequence of this model's tokens can write a complete text"), std::string::npos)
      << g.message();
  EXPECT_NE(g.message().find("0x7E"), std::string::npos) << g.message();
  // an alternative the tokens can write is enough
  EXPECT_TRUE(CompiledGrammar::from_gbnf("root ::= \"a\" (\"~\" | \"b\")", v));
  // a byte only inside a longer token: undecided by bytes, so it compiles ("ab" writes "a" "b")
  auto v2 = TokenVocab::build({"a", "ab", ""}, {2});
  EXPECT_TRUE(CompiledGrammar::from_gbnf("root ::= \"a\" \"b\"", v2));
}

}  // namespace
}  // namespace mopt::grammar
