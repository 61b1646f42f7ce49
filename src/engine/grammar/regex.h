// Regular expressions (the ECMA-262 subset that JSON Schema's `pattern` and vLLM's `guided_regex` use) -> Expr.
//
// Accepted: literals; `.`; classes [..] / [^..] with ranges and \d \w \s \D \W \S inside or outside; escapes
// \t \n \r \f \v \0 \xHH \uHHHH \u{H..} and escaped metacharacters; groups ( ), (?: ), (?<name> ), (?P<name> );
// alternation |; quantifiers * + ? {n} {n,} {n,m} and their lazy forms (*? ...: the same language); ^ at the very
// start and $ at the very end. Refused with an error naming them: lookaround, backreferences, \b \B, \p{..},
// possessive quantifiers, anchors anywhere else, flags (?i) etc.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/grammar/expr.h"

namespace mopt::grammar {

struct RegexOptions {
  // false: the whole text must match (guided_regex). true: JSON Schema `pattern` semantics: the pattern may match
  // anywhere unless anchored with ^ / $ (unanchored ends get "any characters").
  bool search = false;
  // The expression describes a JSON string's *value*; the Expr produced matches its JSON text between the quotes
  // (" \ and control characters written as escapes).
  bool json_string = false;
};

Result<Expr> parse_regex(std::string_view pattern, const RegexOptions& opts = {});
// The same, as a parenthesized GBNF expression.
Result<std::string> regex_to_gbnf(std::string_view pattern, const RegexOptions& opts = {});

// The JSON text (between quotes) of one character of `set`: raw UTF-8 for ordinary characters, \" \\ \b \f \n \r
// \t or \u00XX for the characters JSON requires to be escaped.
Expr json_string_chars(const CodeSet& set);

}  // namespace mopt::grammar
