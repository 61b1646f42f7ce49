// The recursive-descent skeleton that the GBNF front end (gbnf.cpp) and the regex front end (regex.cpp) share:
// a cursor over the text, alternatives separated by '|', UTF-8 characters, fixed-width hex escapes, the opening of a
// character class and the repetition operators * + ? {m} {m,} {m,n}.
//
// `Derived` (CRTP) supplies what differs between the two languages:
//   static constexpr const char* kWhat;   "the grammar" / "the pattern": the subject of error messages
//   [[noreturn]] void fail(const std::string& what) const;   throws its own error type with its own position
//   Expr parse_seq(int depth);            one alternative
//   void skip_blank(bool newlines);       spaces and comments allowed after '|' and inside {m,n} (none in a regex)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/strfmt.h"
#include "engine/grammar/expr.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar {

template <class Derived>
class Descent {
 protected:
  Descent(std::string_view s, int max_depth) : s_(s), max_depth_(max_depth) {}

  bool eof() const { return pos_ >= s_.size(); }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

  // alts ::= seq ('|' seq)*, at group depth `depth` (0: the top level).
  Expr parse_alts(int depth) {
    if (depth > max_depth_) self().fail(strfmt("%s nests more than %d levels deep", Derived::kWhat, max_depth_));
    std::vector<Expr> alts;
    alts.push_back(self().parse_seq(depth));
    while (at('|')) {
      ++pos_;
      self().skip_blank(true);
      alts.push_back(self().parse_seq(depth));
    }
    return Expr::alt(std::move(alts));
  }

  // The code point of the UTF-8 character at pos_; advances over it.
  uint32_t parse_utf8() {
    uni::Decoded d = uni::decode(s_, pos_);
    if (!d.valid || d.len == 0) self().fail(strfmt("%s is not valid UTF-8", Derived::kWhat));
    pos_ += d.len;
    return d.cp;
  }

  // `n` hex digits at pos_ (the body of an escape \xHH, \uHHHH, ...).
  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (eof()) self().fail("unfinished escape");
      const int d = hex_digit(s_[pos_++]);
      if (d < 0) self().fail("expected a hex digit in the escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // `cp` if an escape may stand for it (a Unicode scalar value); fails otherwise.
  uint32_t scalar_value(uint32_t cp) const {
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) self().fail("the escape is not a Unicode scalar value");
    return cp;
  }

  // At the '[' of a character class: moves past it and a '^' after it; true for the '^' (a negated class).
  bool open_class() {
    ++pos_;
    if (!at('^')) return false;
    ++pos_;
    return true;
  }

  struct Bounds {
    int lo = 0, hi = -1;  // hi -1: unbounded
  };
  // A repetition operator at pos_ (* + ? {m} {m,} {m,n}): its bounds, pos_ past it; nullopt (pos_ unmoved) when
  // there is none.
  std::optional<Bounds> parse_repeat_op() {
    if (eof()) return std::nullopt;
    const char c = s_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      return Bounds{c == '+' ? 1 : 0, c == '?' ? 1 : -1};
    }
    if (c != '{') return std::nullopt;
    ++pos_;
    self().skip_blank(false);
    Bounds b;
    b.lo = b.hi = parse_count();
    self().skip_blank(false);
    if (at(',')) {
      ++pos_;
      self().skip_blank(false);
      b.hi = at('}') ? -1 : parse_count();
      self().skip_blank(false);
    }
    if (!at('}')) self().fail("expected '}' to close the repetition");
    ++pos_;
    if (b.hi != -1 && b.hi < b.lo) self().fail(strfmt("repetition {%d,%d}: max < min", b.lo, b.hi));
    return b;
  }

  std::string_view s_;
  size_t pos_ = 0;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  const Derived& self() const { return static_cast<const Derived&>(*this); }

  int parse_count() {
    std::string error;
    const int n = parse_repeat_count(s_, pos_, error);
    if (n < 0) self().fail(error);
    return n;
  }

  int max_depth_;
};

}  // namespace mopt::grammar
