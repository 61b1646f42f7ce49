#include "engine/grammar/gbnf.h"

#include <map>

#include "engine/grammar/descent.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar {
namespace {

constexpr int kMaxDepth = 256;

struct ParseError {
  std::string message;
};

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class Parser : Descent<Parser> {
 public:
  static constexpr const char* kWhat = "the grammar";

  explicit Parser(std::string_view s) : Descent(s, kMaxDepth) {}

  Grammar parse(std::string_view root) {
    Grammar g;
    g.root = std::string(root);
    std::map<std::string, size_t> line_of;
    skip_blank(true);
    while (!eof()) {
      const size_t line = line_at(pos_);
      std::string name = parse_name("a rule name");
      skip_blank(false);
      if (s_.compare(pos_, 3, "::=") != 0) fail("expected '::=' after the rule name '" + name + "'");
      pos_ += 3;
      skip_blank(true);
      if (auto it = line_of.find(name); it != line_of.end())
        fail("the rule '" + name + "' is defined twice (first on line " + std::to_string(it->second) + ")");
      line_of[name] = line;
      Expr body = parse_alts(0);
      if (!eof() && !at_rule_start()) fail("unexpected '" + std::string(1, s_[pos_]) + "'");
      g.rules.push_back({std::move(name), std::move(body)});
      skip_blank(true);
    }
    if (g.rules.empty()) fail("the grammar defines no rules");
    if (!line_of.count(g.root)) throw ParseError{"the grammar has no '" + g.root + "' rule (the start rule)"};
    return g;
  }

 private:
  friend class Descent<Parser>;

  // The line of position p. Rules are met in order, so the count goes on from the last rule's position (counting
  // from the start for every rule was quadratic: a 300 KB grammar of 20k one-line rules took seconds; fuzzing).
  size_t line_at(size_t p) {
    if (p < line_pos_) line_pos_ = 0, line_ = 1;
    for (; line_pos_ < p && line_pos_ < s_.size(); ++line_pos_) line_ += s_[line_pos_] == '\n';
    return line_;
  }
  size_t line_pos_ = 0, line_ = 1;  // line_at's count: the line of s_[line_pos_]

  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw ParseError{"line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what};
  }

  // Skips spaces, tabs, comments and (when newlines) line breaks.
  void skip_blank(bool newlines) {
    while (!eof()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At `name ::=` (after blanks)?
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && word_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
    return s_.compare(p, 3, "::=") == 0;
  }

  // After a term at the rule's top level: true when the rule goes on (on this line, or on the next lines when
  // they do not start a new rule).
  bool continues(int depth) {
    skip_blank(false);
    if (eof()) return false;
    if (s_[pos_] != '\n' && s_[pos_] != '\r') return true;
    skip_blank(true);
    return !eof() && (depth > 0 || !at_rule_start());
  }

  std::string parse_name(const char* what) {
    size_t start = pos_;
    while (!eof() && word_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail(std::string("expected ") + what);
    return std::string(s_.substr(start, pos_ - start));
  }

  Expr parse_seq(int depth) {
    std::vector<Expr> items;
    while (!eof()) {
      char c = s_[pos_];
      if (c == '|' || c == ')') break;
      if (depth == 0 && word_char(c) && at_rule_start()) break;
      Expr t = parse_term(depth);
      if (auto b = parse_repeat_op()) t = Expr::repeat(std::move(t), b->lo, b->hi);
      items.push_back(std::move(t));
      if (depth > 0) {
        skip_blank(true);
      } else if (!continues(depth)) {
        break;
      }
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_term(int depth) {
    char c = s_[pos_];
    if (c == '"') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::cls({{0, kMaxCodePoint}});
    }
    if (c == '(') {
      ++pos_;
      skip_blank(true);
      Expr inner = parse_alts(depth + 1);
      if (eof() || s_[pos_] != ')') fail("expected ')' to close the group");
      ++pos_;
      return inner;
    }
    if (c == '<' || c == '!')
      fail("token references (<...>, !<...>) are not supported; write the text the token stands for");
    if (word_char(c)) return Expr::ref(parse_name("a rule name"));
    fail("unexpected '" + std::string(1, c) + "' (expected a string, a [class], a rule name, '(' or '.')");
  }

  // One code point of a literal or class (after any escape).
  uint32_t parse_char() {
    if (eof()) fail("unfinished string or class");
    if (s_[pos_] == '\\') {
      ++pos_;
      if (eof()) fail("unfinished escape");
      char e = s_[pos_++];
      uint32_t cp = 0;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint8_t>(e);
        case 'x': cp = parse_hex(2); break;
        case 'u': cp = parse_hex(4); break;
        case 'U': cp = parse_hex(8); break;
        default: --pos_; fail(std::string("unknown escape '\\") + e + "'");
      }
      return scalar_value(cp);
    }
    return parse_utf8();
  }

  Expr parse_literal() {
    ++pos_;  // "
    std::string bytes;
    while (true) {
      if (eof() || s_[pos_] == '\n') fail("unterminated string literal");
      if (s_[pos_] == '"') break;
      uni::append_utf8(bytes, parse_char());
    }
    ++pos_;
    return bytes.empty() ? Expr::empty() : Expr::literal(std::move(bytes));
  }

  Expr parse_class() {
    const bool negated = open_class();
    CodeSet set;
    while (true) {
      if (eof() || s_[pos_] == '\n') fail("unterminated character class");
      if (s_[pos_] == ']') break;
      uint32_t lo = parse_char(), hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("character range with its end before its start");
      }
      set.push_back({lo, hi});
    }
    ++pos_;
    return Expr::cls(negated ? complement(set) : normalize(std::move(set)));
  }
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  if (text.size() > kMaxGrammarBytes)
    return error("the grammar is %zu bytes; the limit is %zu", text.size(), kMaxGrammarBytes);
  try {
    return Parser(text).parse(root);
  } catch (const ParseError& e) {
    return Status::error("grammar: " + e.message);
  }
}

}  // namespace mopt::grammar
