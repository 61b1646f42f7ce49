// JSON Schema -> grammar: texts drawn at random from the compiled grammar parse as JSON and pass a small
// independent validator of the schema (below); hand-picked valid and invalid texts; every unsupported keyword and
// unsatisfiable schema is refused with a message naming it.
#include <cstdio>
#include <regex>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "server/json_schema.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::server {
namespace {

using json = nlohmann::ordered_json;
using grammar::testing::byte_vocab;
using grammar::testing::compile_or_die;
using grammar::testing::kByteEos;
using grammar::testing::matches;

// ---- an independent validator for the keywords the compiler supports

bool validate(const json& v, const json& s, const json& root);

const json& deref(const json& root, const std::string& ref) {
  return root.at(json::json_pointer(ref.substr(1)));
}

bool has_type(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  return v.is_null();
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) return validate(v, deref(root, s["$ref"]), root);
  if (s.contains("allOf"))
    for (const json& b : s["allOf"])
      if (!validate(v, b, root)) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const json& b : s["anyOf"]) any = any || validate(v, b, root);
    if (!any) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const json& b : s["oneOf"]) n += validate(v, b, root);
    if (n != 1) return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) ok = has_type(v, s["type"]);
    else
      for (const json& t : s["type"]) ok = ok || has_type(v, t);
    if (!ok) return false;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!validate(x, props[k], root)) return false;
      } else if (s.contains("additionalProperties") && !validate(x, s["additionalProperties"], root)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    const json prefix = s.value("prefixItems", json::array());
    for (size_t i = 0; i < v.size(); ++i) {
      if (i < prefix.size()) {
        if (!validate(v[i], prefix[i], root)) return false;
      } else if (s.contains("items") && !validate(v[i], s["items"], root)) {
        return false;
      }
    }
  }
  if (v.is_string()) {
    const std::string x = v.get<std::string>();
    if (s.contains("minLength") && code_points(x) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && code_points(x) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(x, std::regex(s["pattern"].get<std::string>()))) return false;
    if (s.value("format", "") == "date" && !std::regex_match(x, std::regex(R"(\d{4}-\d\d-\d\d)"))) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  return true;
}

std::shared_ptr<grammar::CompiledGrammar> schema_grammar(const json& schema) {
  auto g = json_schema_to_gbnf(schema);
  EXPECT_TRUE(g) << g.message();
  return g ? compile_or_die(*g) : nullptr;
}

// A random text of the grammar (a random walk over the byte vocabulary, ending where it may with probability
// 1/4); "" if it ran past max_bytes.
std::string sample(grammar::CompiledGrammar& g, Xoshiro256& rng, size_t max_bytes = 4000) {
  grammar::Matcher m(std::shared_ptr<grammar::CompiledGrammar>(&g, [](grammar::CompiledGrammar*) {}));
  std::string out;
  while (out.size() < max_bytes) {
    const grammar::TokenMask& mask = m.allowed();
    if (mask.allows(kByteEos) && (m.complete() || rng.next() % 4 == 0)) return out;
    std::vector<int32_t> ok;
    for (int32_t t = 0; t < 256; ++t)
      if (mask.allows(t)) ok.push_back(t);
    if (ok.empty()) return "";
    // prefer structure over long strings and whitespace: closing characters get extra weight
    int32_t t = ok[rng.next() % ok.size()];
    for (int32_t c : ok)
      if ((c == '"' || c == '}' || c == ']' || c == ',') && rng.next() % 3 == 0) t = c;
    EXPECT_TRUE(m.accept(t));
    out += static_cast<char>(t);
  }
  return "";
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", 3, null]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                      "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city"], "additionalProperties": false},
        "ok": {"type": "boolean"}, "score": {"type": ["number", "null"]}},
       "required": ["name", "age", "tags"], "additionalProperties": false})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "exclusiveMinimum": -5,
        "exclusiveMaximum": 1234}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"anyOf": [{"type": "string", "minLength": 2, "maxLength": 4}, {"type": "integer", "minimum": 10,
        "maximum": 99}, {"const": {"k": [1, 2]}}]})",
    R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
        "required": ["kind", "x"], "additionalProperties": false}, {"type": "object", "properties": {"kind":
        {"const": "b"}, "y": {"type": "boolean"}}, "required": ["kind"], "additionalProperties": false}]})",
    R"({"type": "array", "prefixItems": [{"type": "string", "format": "date"}, {"type": "boolean"}],
        "items": {"type": "null"}, "maxItems": 4})",
    R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1, "maximum": 3}},
        "additionalProperties": {"type": "string", "maxLength": 3}, "required": ["a"]})",
    R"({"type": "object", "properties": {"é": {"const": 1}, "ab": {"const": 2}}, "additionalProperties":
        {"const": true}})",
};

TEST(JsonSchema, RandomTextsOfTheGrammarValidate) {
  Xoshiro256 rng(3);
  for (const char* src : kSchemas) {
    const json schema = json::parse(src);
    auto g = schema_grammar(schema);
    ASSERT_TRUE(g) << src;
    int n = 0;
    for (int i = 0; i < 150; ++i) {
      const std::string text = sample(*g, rng);
      if (text.empty()) continue;
      ++n;
      json v;
      ASSERT_NO_THROW(v = json::parse(text)) << text;
      EXPECT_TRUE(validate(v, schema, schema)) << "schema " << src << "\ntext " << text;
    }
    EXPECT_GT(n, 100) << src;  // the walks finish
  }
}

TEST(JsonSchema, ValidAndInvalidTexts) {
  const json schema = json::parse(kSchemas[0]);
  auto g = schema_grammar(schema);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(*g, R"({"name": "Ann", "age": 42, "tags": ["x"]})"));
  EXPECT_TRUE(matches(*g, "{\n  \"name\": \"\\u00e9\\n\",\n  \"age\": 0,\n  \"role\": null,\n  \"tags\": [\"a\", \"b\"],\n"
                          "  \"address\": {\"city\": \"Oslo\", \"zip\": \"01234\"},\n  \"score\": -1.5e3\n}"));
  EXPECT_FALSE(matches(*g, R"({"age": 42, "name": "Ann", "tags": ["x"]})"));  // properties in schema order
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "age": 151, "tags": ["x"]})"));
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "age": 1, "tags": []})"));   // minItems
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "tags": ["x"]})"));          // required age
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "age": 1, "tags": ["x"], "zz": 1})"));  // no additional properties
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "age": 1, "tags": ["x"], "role": "root"})"));
  EXPECT_FALSE(matches(*g, R"({"name": "Ann", "age": 1, "tags": ["x"], "address": {"city": "a", "zip": "1"}})"));
  // additional properties: not under a declared name (whose schema differs)
  auto extra = schema_grammar(json::parse(kSchemas[5]));
  EXPECT_TRUE(matches(*extra, R"({"a": 2, "b": "xyz", "aa": "q"})"));
  EXPECT_FALSE(matches(*extra, R"({"a": 2, "a": "x"})"));
  EXPECT_FALSE(matches(*extra, R"({"a": 4})"));
  // A required property that 'properties' does not declare is an additional one: its value follows
  // 'additionalProperties' (found by MutatedSchemasCompileOrAreRefused: it took any value).
  auto req = schema_grammar(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["b"], "additionalProperties": {"type": "string", "maxLength": 2}})"));
  EXPECT_TRUE(matches(*req, R"({"b": "xy"})"));
  EXPECT_TRUE(matches(*req, R"({"a": 1, "b": "x"})"));
  EXPECT_FALSE(matches(*req, R"({"b": 1})"));
  EXPECT_FALSE(matches(*req, R"({"b": "xyz"})"));
  EXPECT_FALSE(matches(*req, R"({"a": 1})"));
  auto obj = compile_or_die(json_object_gbnf());
  EXPECT_TRUE(matches(*obj, R"({"a": [1, {"b": null}, "c"], "d": true})"));
  EXPECT_FALSE(matches(*obj, R"([1])"));
}

// Hostile schemas (response_format and tools come from requests): random edits of the schemas above that still
// parse as JSON compile to a grammar or are refused with a message, never crash (ASan / UBSan in CI); a grammar
// that compiles (under small limits) gives texts that are JSON and pass the independent validator.
TEST(JsonSchema, MutatedSchemasCompileOrAreRefused) {
  const std::string alphabet = "{}[]\",:0123456789-.eEtrufalsn#/$ ";
  Xoshiro256 rng(977);
  auto rnd = [&](size_t n) { return static_cast<size_t>(rng.next() % n); };
  grammar::GrammarLimits small;
  small.automaton.max_nfa_states = 20000;
  small.automaton.max_positions = 20000;
  int parsed = 0, compiled = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string src = kSchemas[rnd(std::size(kSchemas))];
    const int edits = 1 + static_cast<int>(rnd(2));
    for (int e = 0; e < edits && !src.empty(); ++e) {
      const size_t pos = rnd(src.size());
      if (rnd(2)) src[pos] = alphabet[rnd(alphabet.size())];
      else src.erase(pos, 1 + rnd(4));
    }
    const json schema = json::parse(src, nullptr, false);
    if (schema.is_discarded()) continue;
    ++parsed;
    auto text = json_schema_to_gbnf(schema);
    if (!text) {
      EXPECT_FALSE(text.message().empty()) << src;
      continue;
    }
    auto g = grammar::CompiledGrammar::from_gbnf(*text, byte_vocab(), small);
    if (!g) {
      EXPECT_FALSE(g.message().empty()) << src;
      continue;
    }
    ++compiled;
    for (int i = 0; i < 3; ++i) {
      const std::string out = sample(**g, rng);
      if (out.empty()) continue;
      const json v = json::parse(out, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << "schema " << src << "\ntext " << out;
      EXPECT_TRUE(validate(v, schema, schema)) << "schema " << src << "\ntext " << out;
    }
  }
  std::printf("%d of 6000 mutated schemas parsed, %d compiled\n", parsed, compiled);
  EXPECT_GT(compiled, 150);  // the edits are not all refused
}

TEST(JsonSchema, RefusalsNameTheKeywordAndWhere) {
  struct Case {
    const char* schema;
    const char* says;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"x": {"type": "string", "patternProperties": {}}}})",
       "unsupported JSON Schema keyword 'patternProperties' (at #/properties/x)"},
      {R"({"type": "object", "minProperties": 1})", "unsupported JSON Schema keyword 'minProperties'"},
      {R"({"not": {"type": "string"}})", "unsupported JSON Schema keyword 'not'"},
      {R"({"type": "number", "multipleOf": 2})", "unsupported JSON Schema keyword 'multipleOf'"},
      {R"({"type": "number", "minimum": 2})", "supported on type integer only"},
      {R"({"type": "array", "uniqueItems": true})", "uniqueItems"},
      {R"({"type": "string", "format": "email"})", "'format' \"email\" is not supported"},
      {R"j({"type": "string", "pattern": "(?=a)"})j", "lookahead"},
      {R"({"type": "string", "minLength": 5, "maxLength": 2})", "no string can match"},
      {R"({"type": "integer", "minimum": 5, "maximum": 3})", "leave no value"},
      {R"({"enum": []})", "'enum' is empty"},
      {R"({"type": "integer", "enum": ["a"]})", "no 'enum'/'const' value has the 'type'"},
      {R"(false)", "the schema false matches no value"},
      {R"({"$ref": "http://example.com/s.json"})", "points outside the schema"},
      {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "exactly one subschema"},
      {R"({"type": "string", "anyOf": [{"maxLength": 3}]})", "'anyOf' together with 'type'"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]})", "branches 0 and 1 may both match"},
      {R"({"type": "strin"})", "unknown type 'strin'"},
      {R"({"type": "integer", "maxLength": 3})", "'maxLength' does not apply"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "use 'prefixItems'"},
      {R"({"type": "array", "prefixItems": [{}], "items": false, "minItems": 2})", "no array can match"},
      {R"({"type": "object", "required": ["x"], "additionalProperties": false})",
       "required property 'x' is not in 'properties' and 'additionalProperties' is false"},
  };
  for (const Case& c : cases) {
    auto g = json_schema_to_gbnf(json::parse(c.schema));
    ASSERT_FALSE(g) << c.schema;
    EXPECT_NE(g.message().find(c.says), std::string::npos) << c.schema << "\n  " << g.message();
  }
  // oneOf with a discriminator or distinct types is fine
  EXPECT_TRUE(json_schema_to_gbnf(json::parse(kSchemas[3])));
  EXPECT_TRUE(json_schema_to_gbnf(json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})")));
}

}  // namespace
}  // namespace mopt::server
