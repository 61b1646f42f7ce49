// GBNF (llama.cpp's grammar format) -> Grammar. The subset accepted (docs/structured_output.md has the table):
//
//   rule      ::= name "::=" alternatives          names: [A-Za-z0-9_-]+; the start rule is `root`
//   alts      ::= sequence ("|" sequence)*
//   sequence  ::= (term quantifier?)*               an empty sequence matches the empty string
//   term      ::= "literal" | [class] | [^class] | name | "(" alts ")" | "."
//   quantifier::= "*" | "+" | "?" | "{m}" | "{m,}" | "{m,n}"
//   escapes   : \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH (code points, written as UTF-8)
//   comments  : "#" to the end of the line
//
// A rule may continue on the next lines: it ends where the next `name ::=` begins (or at the end of the text).
// `.` is any code point. Not accepted (an error names them): llama.cpp's token references <...>, duplicate rules,
// references to undefined rules (checked by compile()), and unbounded nesting (more than 256 levels).
#pragma once

#include <string_view>

#include "core/status.h"
#include "engine/grammar/expr.h"

namespace mopt::grammar {

constexpr size_t kMaxGrammarBytes = 1 << 20;

// Errors say "line L, column C: <what is wrong>".
Result<Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace mopt::grammar
