// GBNF parsing and lowering: the texts a grammar accepts, its error messages, and the refusals of compile().
#include <pthread.h>

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "engine/grammar/automaton.h"
#include "engine/grammar/gbnf.h"
#include "tokenizer/unicode.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::grammar {
namespace {

using testing::classify;
using testing::compile_or_die;
using testing::matches;

std::string parse_error(std::string_view text) {
  auto g = parse_gbnf(text);
  EXPECT_FALSE(g) << "parsed: " << text;
  return g ? "" : g.message();
}

std::string compile_error(std::string_view text, const AutomatonLimits& lim = {}) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g) << g.message();
  if (!g) return "";
  auto a = compile(*g, lim);
  EXPECT_FALSE(a) << "compiled: " << text;
  return a ? "" : a.message();
}

TEST(Gbnf, LiteralsClassesAndRepetition) {
  auto g = compile_or_die(R"(root ::= "ab" [0-9]+ ("x" | "yz")? [^a-c]{2,3} "."
)");
  EXPECT_TRUE(matches(*g, "ab1xdd."));
  EXPECT_TRUE(matches(*g, "ab123yzdef."));
  EXPECT_TRUE(matches(*g, "ab9dd."));
  EXPECT_FALSE(matches(*g, "ab9ad."));     // 'a' is excluded by [^a-c]
  EXPECT_FALSE(matches(*g, "abxdd."));     // [0-9]+ needs one digit
  EXPECT_FALSE(matches(*g, "ab1ddddd."));  // {2,3}
  EXPECT_EQ(classify(*g, "ab12"), 0);      // a viable prefix
  EXPECT_EQ(classify(*g, "ac"), -1);
}

TEST(Gbnf, MultiLineRulesCommentsAndRecursion) {
  // The JSON-ish shape llama.cpp's grammars use: rules continue over lines until the next `name ::=`.
  auto g = compile_or_die(R"(# a list of nested lists
root ::= list
list ::=
  "[" (
     item
     ("," item)*   # more items
  )? "]"
item ::= list | [a-z]+
)");
  EXPECT_TRUE(matches(*g, "[]"));
  EXPECT_TRUE(matches(*g, "[a,[b,[]],cd]"));
  EXPECT_FALSE(matches(*g, "[a,]"));
  EXPECT_EQ(classify(*g, "[[[[a"), 0);
}

TEST(Gbnf, EscapesAndUnicode) {
  auto g = compile_or_die(R"(root ::= "\x41\u00e9\U0001F600\n\"" [\u0400-\u04FF] "ö")");
  EXPECT_TRUE(matches(*g, "A\xC3\xA9\xF0\x9F\x98\x80\n\"\xD0\x96\xC3\xB6"));  // é 😀 Ж ö
  EXPECT_EQ(classify(*g, "A\xC3"), 0);  // half of é is a viable prefix
  EXPECT_EQ(classify(*g, "A\xC3\xA8"), -1);
  // `.` is any code point; multi-byte characters are whole characters
  auto dot = compile_or_die(R"(root ::= "<" . ">")");
  EXPECT_TRUE(matches(*dot, "<\xE2\x82\xAC>"));  // €
  EXPECT_FALSE(matches(*dot, "<\xE2\x82>"));
}

TEST(Gbnf, PrintParsesBack) {
  const char* src = R"(root ::= "a\n\"" ([b-d] | x)* "]" y{2,4}
x ::= [^\]\-\^]+
y ::= "" | "z"
)";
  auto g = parse_gbnf(src);
  ASSERT_TRUE(g) << g.message();
  const std::string printed = print_gbnf(*g);
  auto g2 = parse_gbnf(printed);
  ASSERT_TRUE(g2) << g2.message() << "\n" << printed;
  EXPECT_EQ(print_gbnf(*g2), printed);
  auto c1 = compile_or_die(src), c2 = compile_or_die(printed);
  for (const char* t : {"a\n\"]", "a\n\"bxq-]zz", "a\n\"b]", "a\n\"]-"}) EXPECT_EQ(matches(*c1, t), matches(*c2, t)) << t;
}

TEST(Gbnf, ParseErrorsNameLineAndColumn) {
  EXPECT_NE(parse_error("root ::= \"abc").find("line 1"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"a\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"\nx = \"b\"").find("line 2"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"{3,1}").find("max < min"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(parse_error("root ::= <[1234]>").find("token references"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [z-a]").find("end before its start"), std::string::npos);
  EXPECT_NE(parse_error("a ::= \"x\"\na ::= \"y\"\nroot ::= a").find("defined twice"), std::string::npos);
  EXPECT_NE(parse_error("start ::= \"x\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(parse_error("").find("no rules"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\" )").find("unexpected ')'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')')).find("nests"), std::string::npos);
}

// A chain of rules, each calling the next before any text: the left-recursion check walks it as deep as the grammar
// is long. It recursed, and 45k such rules (a 1 MB request grammar) overflowed the stack (found by fuzzing); it now
// keeps its own stack. Run on a thread with a 512 KB stack, where 6000 recursive steps would not fit.
TEST(Gbnf, LongLeftCallChainsDoNotRecurse) {
  std::string chain;
  for (int i = 0; i < 6000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  struct Job {
    std::string text;
    std::string error;
  } ok{"root ::= r0\n" + chain + "r6000 ::= \"y\"\n", ""}, bad{"root ::= r0\n" + chain + "r6000 ::= r0 | \"y\"\n", ""};
  for (Job* job : {&ok, &bad}) {
    pthread_attr_t attr;
    ASSERT_EQ(pthread_attr_init(&attr), 0);
    ASSERT_EQ(pthread_attr_setstacksize(&attr, 512 << 10), 0);
    pthread_t t;
    auto run = [](void* arg) -> void* {
      auto* j = static_cast<Job*>(arg);
      auto g = parse_gbnf(j->text);
      auto a = g ? compile(*g, {}) : Result<Automaton>(g.status());
      j->error = a ? "" : a.message();
      return nullptr;
    };
    ASSERT_EQ(pthread_create(&t, &attr, run, job), 0);
    pthread_join(t, nullptr);
    pthread_attr_destroy(&attr);
  }
  EXPECT_EQ(ok.error, "");
  // The cycle's first and last rules, not all 6001.
  EXPECT_NE(bad.error.find("left recursion: r0 -> r1 -> r2 -> r3 -> ... (5993 more rules) -> r5997 -> r5998 -> "
                           "r5999 -> r6000 -> r0 ("),
            std::string::npos)
      << bad.error.substr(0, 300);
  EXPECT_LT(bad.error.size(), 400u);
}

// Nullability found through a chain of 300 rules, each nullable only if the next is, declared in both orders (each
// rule's callee after it, and before it: one order or the other has callers looked at before their callees are known
// nullable): the left-recursion check must see root call itself through them, and must not when the chain's end
// needs a byte.
TEST(Gbnf, NullableThroughALongChain) {
  for (bool callee_first : {false, true}) {
    SCOPED_TRACE(callee_first ? "each callee declared before its caller" : "each callee declared after its caller");
    std::vector<std::string> lines;
    for (int i = 0; i < 300; ++i)
      lines.push_back("r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " | \"x\"\n");
    if (callee_first) std::reverse(lines.begin(), lines.end());
    std::string chain;
    for (const std::string& line : lines) chain += line;
    const std::string root = "root ::= r0 root \"z\" | \"y\"\n";
    EXPECT_NE(compile_error(root + chain + "r300 ::= \"\"\n").find("left recursion: root -> root"), std::string::npos);
    auto g = parse_gbnf(root + chain + "r300 ::= \"w\"\n");
    ASSERT_TRUE(g) << g.message();
    auto a = compile(*g, {});
    EXPECT_TRUE(a) << a.message();
  }
}

TEST(Gbnf, CompileRefusals) {
  EXPECT_NE(compile_error("root ::= x").find("'x' (used in 'root') is not defined"), std::string::npos);
  EXPECT_NE(compile_error("root ::= root \"a\" | \"b\"").find("left recursion: root -> root"), std::string::npos);
  EXPECT_NE(compile_error("root ::= a\na ::= b? \"x\"\nb ::= \"\" | a \"y\"").find("left recursion"),
            std::string::npos);
  EXPECT_NE(compile_error("root ::= \"a\" root").find("matches no text"), std::string::npos);
  EXPECT_NE(compile_error("root ::= [^\\x00-\\U0010FFFF]").find("matches no text"), std::string::npos);
  AutomatonLimits small;
  small.max_nfa_states = 20000;
  EXPECT_NE(compile_error("root ::= [a-z]{0,30000}", small).find("too large"), std::string::npos);
  EXPECT_NE(compile_error("root ::= [a-z]{0,3000} [a-z]{0,3000}", small).find("too large to determinize"),
            std::string::npos);
}

TEST(Gbnf, DeadAlternativesArePruned) {
  // `loop` can never finish: its branch must not be offered (it would never let the output end).
  auto g = compile_or_die("root ::= \"a\" | loop\nloop ::= \"b\" loop\n");
  EXPECT_TRUE(matches(*g, "a"));
  EXPECT_EQ(classify(*g, "b"), -1);
}

TEST(Utf8Sequences, CoverExactlyTheRange) {
  // Every code point in [lo, hi] (minus surrogates) is encoded by exactly one sequence, and nothing else is.
  for (auto [lo, hi] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 0x10FFFF}, {0x7F, 0x80}, {0x7FF, 0x801},
                                                                   {0xD000, 0xE100}, {0xFFFF, 0x10000},
                                                                   {0x3A5, 0x2F17}, {0x10FF00, 0x10FFFF}}) {
    auto seqs = utf8_sequences(lo, hi);
    auto covered = [&](const std::string& enc) {
      int n = 0;
      for (const auto& s : seqs) {
        if (s.size() != enc.size()) continue;
        bool in = true;
        for (size_t k = 0; k < s.size(); ++k) {
          const uint8_t b = static_cast<uint8_t>(enc[k]);
          in = in && b >= s[k].first && b <= s[k].second;
        }
        n += in;
      }
      return n;
    };
    for (uint32_t cp = lo > 64 ? lo - 64 : 0; cp <= std::min<uint32_t>(hi + 64, 0x10FFFF); ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (cp > lo + 5000 && cp + 5000 < hi) cp = hi - 5000;  // sample the middle of big ranges
      std::string enc;
      uni::append_utf8(enc, cp);
      EXPECT_EQ(covered(enc), cp >= lo && cp <= hi ? 1 : 0) << std::hex << cp;
    }
  }
}

}  // namespace
}  // namespace mopt::grammar
