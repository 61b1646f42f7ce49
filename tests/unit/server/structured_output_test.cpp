// The server's path from a request body to a compiled grammar (parse_constraint, then GrammarCache::get, as
// handle_generate runs them) for constraints that are valid JSON Schema but that this model's vocabulary cannot
// write: a clear error naming the reason, before any generation. The vocabulary here has letters, digits and JSON
// punctuation only, and no byte fallback.
#include <gtest/gtest.h>

#include "server/structured_output.h"
#include "unit/tokenizer/char_tokenizer.h"

namespace mopt::server {
namespace {

std::string compile_error(GrammarCache& cache, const char* body) {
  auto c = parse_constraint(json::parse(body));
  const auto* constraint = std::get_if<Constraint>(&c);
  EXPECT_TRUE(constraint) << body;
  if (!constraint) return "(refused by parse_constraint)";
  auto g = cache.get(constraint->gbnf, true);
  return g ? "" : g.message();
}

TEST(GrammarCache, SchemasTheVocabularyCannotWrite) {
  auto tok = test::char_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789{}[]\":, .-");
  ASSERT_TRUE(tok);
  GrammarCache cache(*tok);
  EXPECT_EQ(compile_error(cache, R"({"guided_json": {"enum": ["ok", "fine"]}})"), "");
  // "ü" (0xC3 0xBC) is in no token: the text can begin ('"') but never be completed
  std::string e = compile_error(cache, R"({"guided_json": {"enum": ["über"]}})");
  EXPECT_NE(e.find("no sequence of this model's tokens can write a complete text"), std::string::npos) << e;
  EXPECT_NE(e.find("0xC3"), std::string::npos) << e;
  // an object with a required property whose value must contain a tab
  e = compile_error(cache, R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
      {"type": "object", "properties": {"a": {"const": "x\ty"}}, "required": ["a"]}}}})");
  EXPECT_NE(e.find("no sequence of this model's tokens"), std::string::npos) << e;
  // no token can even begin it
  e = compile_error(cache, R"({"guided_regex": "[A-Z]+"})");
  EXPECT_NE(e.find("no token of this model's vocabulary can begin"), std::string::npos) << e;
  // one alternative the vocabulary can write is enough
  EXPECT_EQ(compile_error(cache, R"({"guided_choice": ["über", "uber"]})"), "");
}

TEST(GrammarCache, RepeatsAreAnsweredFromTheCacheErrorsToo) {
  auto tok = test::char_tokenizer("abcdefghijklmnopqrstuvwxyz0123456789{}[]\":, .-");
  ASSERT_TRUE(tok);
  GrammarCache cache(*tok, 2);
  const std::string bad = "root ::= [A-Z]+";  // no token can begin it
  const std::string good = "root ::= \"ok\"";
  auto e1 = cache.get(bad, true);
  ASSERT_FALSE(e1);
  EXPECT_EQ(cache.compiles(), 1u);
  auto e2 = cache.get(bad, true);
  ASSERT_FALSE(e2);
  EXPECT_EQ(e2.message(), e1.message());
  EXPECT_EQ(cache.compiles(), 1u);  // the error came from the cache
  auto g1 = cache.get(good, true);
  ASSERT_TRUE(g1) << g1.message();
  auto g2 = cache.get(good, true);
  ASSERT_TRUE(g2);
  EXPECT_EQ(g1->get(), g2->get());
  EXPECT_EQ(cache.compiles(), 2u);
  ASSERT_TRUE(cache.get(good, false));  // the other vocabulary rendering is another entry
  EXPECT_EQ(cache.compiles(), 3u);
  // capacity 2: the least recently used (the failed grammar) is gone and compiles again, with the same error
  auto e3 = cache.get(bad, true);
  ASSERT_FALSE(e3);
  EXPECT_EQ(e3.message(), e1.message());
  EXPECT_EQ(cache.compiles(), 4u);
}

}  // namespace
}  // namespace mopt::server
