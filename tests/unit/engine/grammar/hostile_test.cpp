// Hostile grammars and patterns (guided_grammar, guided_regex and JSON Schema `pattern` come from requests):
// random mutations of valid GBNF grammars and regular expressions parse and compile, or fail with a message;
// never crash (ASan / UBSan in CI) nor exceed the limits they compile under. A grammar that compiles is then
// walked with random allowed bytes: every byte its mask allows is accepted.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::grammar {
namespace {

using testing::byte_vocab;
using testing::kByteEos;

// One to three edits of s: a character replaced by one of `alphabet`, a run of 1-4 characters deleted, or a run of
// 1-8 copied to another place.
std::string mutate(std::string s, const std::string& alphabet, Xoshiro256& rng) {
  auto rnd = [&](size_t n) { return static_cast<size_t>(rng.next() % n); };
  const int edits = 1 + static_cast<int>(rnd(3));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t pos = rnd(s.size());
    switch (rnd(3)) {
      case 0: s[pos] = alphabet[rnd(alphabet.size())]; break;
      case 1: s.erase(pos, 1 + rnd(4)); break;
      default: {  // (the draws in sequence: the order of a call's arguments is unspecified)
        const std::string run = s.substr(pos, 1 + rnd(8));
        s.insert(rnd(s.size() + 1), run);
        break;
      }
    }
  }
  return s;
}

// Small limits, so that a mutation into a huge repetition fails fast instead of compiling for seconds.
GrammarLimits small_limits() {
  GrammarLimits l;
  l.automaton.max_nfa_states = 20000;
  l.automaton.max_positions = 20000;
  l.mask_cache_bytes = 1u << 20;
  return l;
}

// Up to 24 steps: the mask of the state, then one of the bytes it allows (the end-of-text id ends the walk).
void walk(std::shared_ptr<CompiledGrammar> g, Xoshiro256& rng, const std::string& what) {
  Matcher m(std::move(g));
  for (int step = 0; step < 24; ++step) {
    const TokenMask& mask = m.allowed();
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t <= kByteEos; ++t)
      if (mask.allows(t)) allowed.push_back(t);
    if (allowed.empty()) return;  // a state the limits cut short
    const int32_t t = allowed[rng.next() % allowed.size()];
    if (t == kByteEos) {
      EXPECT_TRUE(m.accepting()) << what;
      return;
    }
    ASSERT_TRUE(m.accept(t)) << "byte " << t << " was allowed: " << what;
  }
}

// Compiles text (a whole GBNF grammar): true when it compiled; a refusal must say why.
bool try_gbnf(const std::string& text, Xoshiro256& rng) {
  auto g = CompiledGrammar::from_gbnf(text, byte_vocab(), small_limits());
  if (!g) {
    EXPECT_FALSE(g.message().empty()) << text;
    return false;
  }
  walk(*g, rng, text);
  return true;
}

TEST(HostileGrammar, MutatedGbnfCompilesOrFailsCleanly) {
  const std::string bases[] = {
      R"(root ::= "{" ws pair ("," ws pair)* ws "}"
pair ::= str ws ":" ws val
val ::= str | num | "true" | "false" | "null" | root | "[" ws (val ("," ws val)*)? ws "]"
str ::= "\"" ([^"\\\x00-\x1f] | "\\" ["\\/bfnrt])* "\""
num ::= "-"? [0-9]+ ("." [0-9]{1,3})? ([eE] [-+]? [0-9]+)?
ws ::= [ \t\n]{0,4}
)",
      R"(# a greeting
root ::= greet " " name{1,3} "!"?
greet ::= "h\u00e9llo" | "\U0001F600" | [A-Z] [a-z]*
name ::= [^\x00-\x20!]+ | . "."
)",
      R"(root ::= list
list ::=
  "[" (
     item
     ("," item)*
  )? "]"
item ::= list | [a-z]+ | "x"{2,5}
)"};
  const std::string alphabet = "\"[]()|*+?{}:=-^\\.,0123456789abxuU \n#";
  Xoshiro256 rng(20261204);
  int compiled = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const std::string& base = bases[rng.next() % std::size(bases)];
    compiled += try_gbnf(mutate(base, alphabet, rng), rng);
  }
  std::printf("%d of 4000 mutated grammars compiled\n", compiled);
  EXPECT_GT(compiled, 200);  // the mutations are not all trivially rejected
}

TEST(HostileGrammar, MutatedRegexCompilesOrFailsCleanly) {
  const std::string bases[] = {"\\d{3}-\\d{4}", "(?:a|bc)+[x-z]*", "colou?r\\s\\w+", "[^ab]{1,3}c(d|e|)f*?",
                               "\\.\\*\\[\\u00e9[\\d\\-]+", "(x|y)(?<n>z)?\\b", "^a[bc]+$"};
  const std::string alphabet = "()[]{}|*+?^$\\.-,0123456789abdswuxDSW:<>= ";
  Xoshiro256 rng(88172645);
  int compiled = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const std::string re = mutate(bases[rng.next() % std::size(bases)], alphabet, rng);
    RegexOptions opts;
    opts.search = rng.next() % 2;
    opts.json_string = rng.next() % 2;
    auto body = regex_to_gbnf(re, opts);
    if (!body) {
      EXPECT_FALSE(body.message().empty()) << re;
      continue;
    }
    compiled += try_gbnf("root ::= " + *body + "\n", rng);
  }
  std::printf("%d of 2000 mutated patterns compiled\n", compiled);
  EXPECT_GT(compiled, 300);
}

}  // namespace
}  // namespace mopt::grammar
