// JSON Schema -> GBNF (for the grammar engine in src/engine/grammar). Every keyword either constrains the output or
// is refused with an error naming it and where it is (a JSON pointer); annotations (title, description, default,
// examples, ...) are the only keywords that have no effect, because they have none in JSON Schema either.
// docs/structured_output.md has the table of what is supported.
//
// The grammar produces a subset of the values the schema allows, in a canonical shape: properties in the schema's
// order, no properties beyond the declared ones unless additionalProperties says so (then after them, with keys
// that are not declared names and contain no escapes), whitespace between tokens of one space or a newline and up
// to 20 spaces or tabs (as llama.cpp's), integers of at most 16 digits (or the bounds given), numbers with at most
// 16 fraction digits and a two-digit exponent. Every value it produces validates against the schema.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace mopt::server {

class SchemaCompiler {
 public:
  using json = nlohmann::ordered_json;

  // Rules for schemas of one document (refs like "#/$defs/X" resolve inside `document`). `prefix` starts every
  // rule name (several documents can share one grammar, e.g. one per tool).
  SchemaCompiler(const json& document, std::string prefix);

  // The rule name for the document's root schema (compiling it on first use).
  Result<std::string> root_rule();
  // The rules written so far, as GBNF lines.
  const std::string& rules() const { return rules_; }
  // Shared rules the compiled rules use (ws, json-string, ...): add them once per grammar.
  static std::string primitives();

 private:
  struct Error {
    std::string message;
  };
  std::string compile(const json& s, const std::string& path, int depth);
  std::string compile_ref(const std::string& ref, const std::string& path, int depth);
  std::string compile_typed(const json& s, const std::string& type, const std::string& path, int depth);
  std::string compile_object(const json& s, const std::string& path, int depth);
  std::string compile_array(const json& s, const std::string& path, int depth);
  std::string compile_string(const json& s, const std::string& path);
  std::string compile_integer(const json& s, const std::string& path);
  std::string compile_enum(const json& values, const json& s, const std::string& path);
  std::string compile_alternatives(const json& s, const char* key, const std::string& path, int depth);
  // The value of the count keyword `key` (minLength, maxItems, ...) of `s`; `dflt` when absent.
  int64_t count_keyword(const json& s, const char* key, int64_t dflt, const std::string& path) const;
  void check_keywords(const json& s, const std::string& path);
  void check_one_of_disjoint(const json& branches, const std::string& path);
  std::string new_rule(const std::string& hint, const std::string& body);
  std::string reserve_rule(const std::string& hint);
  const json& resolve(const std::string& ref, const std::string& path);
  [[noreturn]] void fail(const std::string& path, const std::string& what) const;

  const json& doc_;
  std::string prefix_;
  std::string rules_;
  std::set<std::string> names_;
  std::map<std::string, std::string> ref_rules_;  // "#/$defs/X" -> rule name

  friend Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);
};

// A whole grammar (root ::= the schema) for response_format json_schema / guided_json.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// A whole grammar for response_format json_object: any JSON object.
std::string json_object_gbnf();

}  // namespace mopt::server
