#include "engine/grammar/regex.h"

#include "core/strfmt.h"
#include "engine/grammar/descent.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar {
namespace {

constexpr int kMaxDepth = 128;

struct RegexError {
  std::string message;
};

const CodeSet kDigit = {{'0', '9'}};
const CodeSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMA-262 WhiteSpace + LineTerminator.
const CodeSet kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// `.`: anything but a line terminator.
const CodeSet kDot = complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

class RegexParser : Descent<RegexParser> {
 public:
  static constexpr const char* kWhat = "the pattern";

  RegexParser(std::string_view s, const RegexOptions& o) : Descent(s, kMaxDepth), opts_(o) {}

  Expr parse() {
    bool start_anchor = false, end_anchor = false;
    if (!eof() && s_[pos_] == '^') {
      start_anchor = true;
      ++pos_;
    }
    Expr body = parse_alts(0);
    if (!eof() && s_[pos_] == '$') {
      end_anchor = true;
      ++pos_;
    }
    if (!eof()) {
      if (s_[pos_] == ')') fail("unbalanced ')'");
      if (s_[pos_] == '^' || s_[pos_] == '$') fail("anchors (^ $) are only supported at the start and the end");
      fail(strfmt("unexpected '%c'", s_[pos_]));
    }
    if (!opts_.search) return body;
    std::vector<Expr> parts;
    if (!start_anchor) parts.push_back(Expr::repeat(chars(complement({})), 0, -1));
    parts.push_back(std::move(body));
    if (!end_anchor) parts.push_back(Expr::repeat(chars(complement({})), 0, -1));
    return Expr::seq(std::move(parts));
  }

 private:
  friend class Descent<RegexParser>;

  [[noreturn]] void fail(const std::string& what) const {
    throw RegexError{strfmt("regex at offset %zu: %s", pos_, what.c_str())};
  }
  void skip_blank(bool) {}  // every character of a regex counts

  // A character set as an Expr (JSON-escaped when the options say so).
  Expr chars(const CodeSet& set) const { return opts_.json_string ? json_string_chars(set) : Expr::cls(set); }

  Expr parse_seq(int depth) {
    std::vector<Expr> items;
    while (!eof()) {
      char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$' && depth == 0 && pos_ + 1 == s_.size()) break;  // the end anchor
      if (c == '^' || c == '$') fail("anchors (^ $) are only supported at the start and the end");
      Expr atom = parse_atom(depth);
      items.push_back(parse_quantifier(std::move(atom)));
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_atom(int depth) {
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (!eof() && s_[pos_] == '?') {
        ++pos_;
        if (eof()) fail("unfinished group");
        char k = s_[pos_];
        if (k == ':') {
          ++pos_;
        } else if (k == '=' || k == '!') {
          fail("lookahead (?= (?! cannot be expressed as a grammar");
        } else if (k == '<' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '=' || s_[pos_ + 1] == '!')) {
          fail("lookbehind (?<= (?<! cannot be expressed as a grammar");
        } else if (k == '<' || (k == 'P' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '<')) {
          size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos) fail("unfinished group name");
          pos_ = close + 1;
        } else {
          fail("group flags (?...) are not supported");
        }
      }
      Expr inner = parse_alts(depth + 1);
      if (eof() || s_[pos_] != ')') fail("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return chars(parse_class());
    if (c == '.') {
      ++pos_;
      return chars(kDot);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail(strfmt("nothing to repeat before '%c'", c));
    if (c == '\\') {
      CodeSet set;
      if (parse_escape(set, false)) return chars(set);
      return literal(set[0].lo);
    }
    return literal(parse_utf8());
  }

  Expr literal(uint32_t cp) const {
    if (opts_.json_string) return json_string_chars({{cp, cp}});
    std::string b;
    uni::append_utf8(b, cp);
    return Expr::literal(std::move(b));
  }

  // Parses an escape at s_[pos_] == '\\'. Returns true with `set` filled for a class escape (\d ...); false with
  // set = {cp} for a single character.
  bool parse_escape(CodeSet& set, bool in_class) {
    ++pos_;
    if (eof()) fail("the pattern ends with '\\'");
    char e = s_[pos_++];
    uint32_t cp;
    switch (e) {
      case 'd': set = kDigit; return true;
      case 'D': set = complement(kDigit); return true;
      case 'w': set = kWord; return true;
      case 'W': set = complement(kWord); return true;
      case 's': set = kSpace; return true;
      case 'S': set = complement(kSpace); return true;
      case 't': cp = '\t'; break;
      case 'n': cp = '\n'; break;
      case 'r': cp = '\r'; break;
      case 'f': cp = '\f'; break;
      case 'v': cp = '\v'; break;
      case '0': cp = 0; break;
      case 'x': cp = parse_hex(2); break;
      case 'u':
        if (!eof() && s_[pos_] == '{') {
          ++pos_;
          size_t close = s_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ || close - pos_ > 6) fail("bad \\u{...} escape");
          cp = parse_hex(static_cast<int>(close - pos_));
          ++pos_;
        } else {
          cp = parse_hex(4);
        }
        break;
      case 'b':
        if (in_class) {
          cp = '\b';
          break;
        }
        [[fallthrough]];
      case 'B': fail("word boundaries (\\b \\B) cannot be expressed as a grammar");
      case 'p': case 'P': fail("Unicode property classes (\\p{...}) are not supported");
      case 'k': fail("backreferences cannot be expressed as a grammar");
      default:
        if (e >= '1' && e <= '9') fail("backreferences cannot be expressed as a grammar");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) fail(strfmt("unknown escape '\\%c'", e));
        cp = static_cast<uint8_t>(e);
        if (cp >= 0x80) fail("escape of a non-ASCII byte");
    }
    scalar_value(cp);
    set = {{cp, cp}};
    return false;
  }

  CodeSet parse_class() {
    const bool negated = open_class();
    CodeSet set;
    bool first = true;
    while (true) {
      if (eof()) fail("unterminated character class");
      if (s_[pos_] == ']' && !first) break;
      first = false;
      CodeSet one;
      bool is_class = false;
      if (s_[pos_] == '\\') {
        is_class = parse_escape(one, true);
      } else {
        const uint32_t cp = parse_utf8();
        one = {{cp, cp}};
      }
      if (!is_class && pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        CodeSet hi;
        if (s_[pos_] == '\\') {
          if (parse_escape(hi, true)) fail("a class escape cannot end a range");
        } else {
          const uint32_t cp = parse_utf8();
          hi = {{cp, cp}};
        }
        if (hi[0].lo < one[0].lo) fail("character range with its end before its start");
        one = {{one[0].lo, hi[0].lo}};
      }
      set.insert(set.end(), one.begin(), one.end());
    }
    ++pos_;
    return negated ? complement(set) : normalize(std::move(set));
  }

  Expr parse_quantifier(Expr atom) {
    while (auto b = parse_repeat_op()) {
      if (at('?')) ++pos_;  // lazy: same language
      else if (at('+')) fail("possessive quantifiers are not supported");
      atom = Expr::repeat(std::move(atom), b->lo, b->hi);
    }
    return atom;
  }

  const RegexOptions& opts_;
};

}  // namespace

Expr json_string_chars(const CodeSet& set) {
  // Characters JSON requires to be escaped: " \ and U+0000..U+001F.
  const CodeSet special = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  CodeSet plain;
  for (const CodeRange& r : set) {
    uint32_t lo = r.lo;
    while (lo <= r.hi) {
      if (contains(special, lo)) {
        ++lo;
        continue;
      }
      // The run of plain characters from lo ends before the next special range (found by range, not by stepping
      // through code points: `.` covers 1.1M of them, and a pattern may hold thousands of dots).
      uint32_t hi = r.hi;
      for (const CodeRange& s : special)
        if (s.lo > lo && s.lo - 1 < hi) hi = s.lo - 1;
      plain.push_back({lo, hi});
      lo = hi + 1;
    }
  }
  std::vector<Expr> alts;
  if (!plain.empty()) alts.push_back(Expr::cls(plain));
  for (const CodeRange& r : set)
    for (uint32_t c = r.lo; c <= std::min<uint32_t>(r.hi, 0x5C); ++c) {
      if (!contains(special, c)) continue;
      switch (c) {
        case '"': alts.push_back(Expr::literal("\\\"")); break;
        case '\\': alts.push_back(Expr::literal("\\\\")); break;
        case '\b': alts.push_back(Expr::literal("\\b")); break;
        case '\f': alts.push_back(Expr::literal("\\f")); break;
        case '\n': alts.push_back(Expr::literal("\\n")); break;
        case '\r': alts.push_back(Expr::literal("\\r")); break;
        case '\t': alts.push_back(Expr::literal("\\t")); break;
        default: alts.push_back(Expr::literal(strfmt("\\u%04x", c)));
      }
    }
  if (alts.empty()) return Expr::cls({});
  return Expr::alt(std::move(alts));
}

Result<Expr> parse_regex(std::string_view pattern, const RegexOptions& opts) {
  if (pattern.size() > 65536) return error("the regex is %zu bytes; the limit is 65536", pattern.size());
  try {
    return RegexParser(pattern, opts).parse();
  } catch (const RegexError& e) {
    return Status::error(e.message);
  }
}

Result<std::string> regex_to_gbnf(std::string_view pattern, const RegexOptions& opts) {
  auto e = parse_regex(pattern, opts);
  if (!e) return e.status();
  std::string out = "(";
  out.append(print_gbnf(*e)).push_back(')');
  return out;
}

}  // namespace mopt::grammar
