// Regex -> grammar, checked against std::regex (ECMAScript) on generated strings: full match (guided_regex),
// search semantics (JSON Schema `pattern`), and the JSON-string form; refusals of what a grammar cannot express.
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "engine/grammar/regex.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::grammar {
namespace {

using testing::compile_or_die;
using testing::matches;

std::shared_ptr<CompiledGrammar> regex_grammar(const std::string& re, RegexOptions opts = {}) {
  auto g = regex_to_gbnf(re, opts);
  EXPECT_TRUE(g) << re << ": " << g.message();
  return g ? compile_or_die("root ::= " + *g) : nullptr;
}

const char* kPatterns[] = {
    "abc",          "a|b|cd",       "(ab)*c",          "[a-c]+d?",        "x{2,3}y{1,}z{0,1}",  "[^ab]c",
    "\\d{3}-\\d{4}", "(?:a|bc)+",    "\\w+\\s\\w+",     "a.c",             "[\\d\\-]+",          "(a|)b",
    "colou?r",      "[abc]{0,2}a",  "(x|y)(?<n>z)?",   "a*?b+?",          "\\.\\*\\[",          "[-a]b[a-]",
};

TEST(Regex, FullMatchAgreesWithStdRegex) {
  Xoshiro256 rng(7);
  const std::string alphabet = "abcdxyz0123- .\n*[";
  for (const char* re : kPatterns) {
    auto g = regex_grammar(re);
    ASSERT_TRUE(g);
    std::regex ref(re == std::string("(x|y)(?<n>z)?") ? "(x|y)(z)?" : re, std::regex::ECMAScript);
    int positives = 0;
    for (int i = 0; i < 400; ++i) {
      std::string s;
      const int len = static_cast<int>(rng.next() % 7);
      for (int k = 0; k < len; ++k) s += alphabet[rng.next() % alphabet.size()];
      const bool want = std::regex_match(s, ref);
      positives += want;
      EXPECT_EQ(matches(*g, s), want) << "regex " << re << " on '" << s << "'";
    }
    // and the strings the grammar should accept by construction
    (void)positives;
  }
  auto g = regex_grammar("\\d{3}-\\d{4}");
  EXPECT_TRUE(matches(*g, "555-1234"));
  EXPECT_FALSE(matches(*g, "555-123"));
}

TEST(Regex, SearchSemanticsForPatterns) {
  RegexOptions search;
  search.search = true;
  Xoshiro256 rng(11);
  for (const char* re : {"ab", "^ab", "ab$", "^a[bc]+$", "\\d"}) {
    auto g = regex_grammar(re, search);
    std::regex ref(re, std::regex::ECMAScript);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      const int len = static_cast<int>(rng.next() % 6);
      for (int k = 0; k < len; ++k) s += "abc1"[rng.next() % 4];
      EXPECT_EQ(matches(*g, s), std::regex_search(s, ref)) << re << " on '" << s << "'";
    }
  }
}

TEST(Regex, JsonStringFormEscapesQuotesBackslashesAndControls) {
  RegexOptions js;
  js.json_string = true;
  auto g = regex_grammar("a[\"\\\\\\n]b.", js);
  // JSON text of the value a"b€ / a\b\t ...
  EXPECT_TRUE(matches(*g, "a\\\"b\xE2\x82\xAC"));
  EXPECT_TRUE(matches(*g, "a\\\\bx"));
  EXPECT_TRUE(matches(*g, "a\\nb\\t"));
  EXPECT_FALSE(matches(*g, "a\"bx"));   // a raw quote would end the JSON string
  EXPECT_FALSE(matches(*g, "a\nbx"));   // a raw newline is not allowed in JSON
  // Every text the grammar accepts decodes (as a JSON string) to a value the regex matches.
  std::regex ref("a[\"\\\\\\n]b.", std::regex::ECMAScript);
  for (const char* t : {"a\\\"b\\u0001", "a\\\\b\\\\", "a\\nb\\\""}) {
    ASSERT_TRUE(matches(*g, t)) << t;
    auto v = nlohmann::json::parse(std::string("\"") + t + "\"").get<std::string>();
    EXPECT_TRUE(std::regex_match(v, ref)) << t;
  }
}

// `.` in the JSON-string form is one class (every code point but " \\ and the controls) plus their escapes. Found by
// fuzzing (fuzz/regex_fuzz.cpp): the class was built by stepping through all 1.1M code points, 2.5 ms per `.`, so a
// pattern of dots kept a request thread busy for minutes; it is now built range by range.
TEST(Regex, JsonStringFormOfAnyCharacterIsOneClass) {
  const std::string any = print_gbnf(json_string_chars({{0, 0x10FFFF}}));
  EXPECT_EQ(any.substr(0, any.find(" | ")), "[ !#-\\[\\]-\\U0010FFFF]") << any;
  EXPECT_NE(any.find("\"\\\\u001f\""), std::string::npos) << any;
  RegexOptions js;
  js.json_string = true;
  auto dots = regex_to_gbnf(std::string(2000, '.'), js);  // ~50 ms, was ~5 s
  ASSERT_TRUE(dots) << dots.message();
}

TEST(Regex, RefusesWhatAGrammarCannotExpress) {
  struct Case {
    const char* re;
    const char* says;
  };
  for (const Case& c : {Case{"a(?=b)", "lookahead"}, Case{"(?<=a)b", "lookbehind"}, Case{"(a)\\1", "backreference"},
                        Case{"\\bword", "word boundaries"}, Case{"\\p{L}", "Unicode property"},
                        Case{"a++", "possessive"}, Case{"a^b", "anchors"}, Case{"(?i)a", "flags"},
                        Case{"(ab", "missing ')'"}, Case{"ab)", "unbalanced"}, Case{"*a", "nothing to repeat"},
                        Case{"[a-", "unterminated"}, Case{"a{3,1}", "max < min"}, Case{"\\q", "unknown escape"}}) {
    auto g = parse_regex(c.re);
    ASSERT_FALSE(g) << c.re;
    EXPECT_NE(g.message().find(c.says), std::string::npos) << c.re << ": " << g.message();
  }
}

}  // namespace
}  // namespace mopt::grammar
