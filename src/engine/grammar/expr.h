// Grammar expressions: the tree that the GBNF parser (gbnf.h) and the regex parser (regex.h) both produce, over
// Unicode code points. compile.h lowers it to byte-level automata; print_gbnf() writes it back as GBNF text, which
// is how the JSON-schema compiler and the regex translator hand their output to the one GBNF front end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mopt::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive
  bool operator==(const CodeRange&) const = default;
};

// A set of code points as sorted, disjoint, non-adjacent ranges.
using CodeSet = std::vector<CodeRange>;
CodeSet normalize(CodeSet s);
CodeSet complement(const CodeSet& s);  // over [0, kMaxCodePoint]
bool contains(const CodeSet& s, uint32_t cp);

struct Expr {
  enum class Kind { kEmpty, kLiteral, kClass, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::string text;        // kLiteral: UTF-8 bytes; kRef: rule name
  CodeSet set;             // kClass: the code points it matches (normalized)
  std::vector<Expr> kids;  // kSeq / kAlt: the parts; kRepeat: one child
  int min = 0, max = -1;   // kRepeat: bounds, max -1 = unbounded

  static Expr empty() { return Expr{}; }
  static Expr literal(std::string bytes);
  static Expr cls(CodeSet s);
  static Expr ref(std::string name);
  static Expr seq(std::vector<Expr> kids);
  static Expr alt(std::vector<Expr> kids);
  static Expr repeat(Expr e, int min, int max);
};

struct Rule {
  std::string name;
  Expr body;
};

// Rules in definition order; `root` names the start rule.
struct Grammar {
  std::vector<Rule> rules;
  std::string root = "root";
};

// Value of a hex digit, -1 if `c` is none (the escapes of both parsers).
int hex_digit(char c);
// The count of a repetition {m,n} at s[pos] (both parsers): advances pos over its digits; -1 with `error` set
// when there are none or the count is above kMaxRepeat.
constexpr int kMaxRepeat = 100000;
int parse_repeat_count(std::string_view s, size_t& pos, std::string& error);

// GBNF text of an expression / a whole grammar (parse_gbnf(print_gbnf(g)) is g up to grouping).
std::string print_gbnf(const Expr& e);
std::string print_gbnf(const Grammar& g);
// A GBNF string literal ("...") with the bytes escaped as needed.
std::string gbnf_literal(std::string_view bytes);

}  // namespace mopt::grammar
