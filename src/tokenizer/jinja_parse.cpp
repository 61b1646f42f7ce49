// Lexer and recursive-descent parser for the Jinja subset of chat templates.
// Whitespace follows Hugging Face's apply_chat_template environment: trim_blocks (drop the first newline after a
// block or comment tag) and lstrip_blocks (drop spaces/tabs before a block or comment tag at the start of a line),
// plus the explicit "-" markers ({%- -%} {{- -}} {#- -#}) and "+" ({%+ keeps leading whitespace).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "core/strfmt.h"
#include "tokenizer/jinja_ast.h"

namespace mopt::jinja {
namespace {

enum class T { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Tok {
  T type;
  std::string s;
  int64_t i = 0;
  double f = 0;
  int line = 0;
};

[[noreturn]] void fail(int line, const std::string& msg) {
  throw Error(strfmt("template line %d: %s", line, msg.c_str()));
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Tok> run() {
    size_t pos = 0;
    bool strip_next = false;  // "-" on the previous tag end: drop leading whitespace of the next text
    while (pos < src_.size()) {
      size_t open = find_tag(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      if (open == std::string::npos) {
        emit_text(std::move(text));
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char marker = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (marker == '-') {
        while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      } else if (kind != '{' && marker != '+') {
        // lstrip_blocks: only when the tag starts its line (just spaces/tabs before it)
        size_t k = open;
        while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
        if (k == 0 || src_[k - 1] == '\n') {
          size_t n = open - k;
          size_t strip = std::min(n, text.size());
          bool all_ws = true;
          for (size_t q = text.size() - strip; q < text.size(); ++q)
            if (text[q] != ' ' && text[q] != '\t') all_ws = false;
          if (all_ws) text.erase(text.size() - strip);
        }
      }
      emit_text(std::move(text));
      line_ = line_at(open);
      pos = open + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      bool right_strip = false;
      if (kind == '#') {
        size_t end = src_.find("#}", pos);
        if (end == std::string::npos) fail(line_, "unterminated comment '{#' (add '#}')");
        right_strip = end > pos && src_[end - 1] == '-';
        pos = end + 2;
      } else {
        toks_.push_back({kind == '{' ? T::kVarBegin : T::kBlockBegin, "", 0, 0, line_});
        pos = lex_tag(pos, kind == '{' ? '}' : '%', right_strip);
      }
      if (right_strip) {
        strip_next = true;
      } else if (kind != '{') {  // trim_blocks
        if (pos < src_.size() && src_[pos] == '\n') ++pos;
        else if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') pos += 2;
      }
    }
    toks_.push_back({T::kEof, "", 0, 0, line_});
    return std::move(toks_);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (;;) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }
  int line_at(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_count_;
      ++line_pos_;
    }
    return line_count_;
  }
  void emit_text(std::string text) {
    if (!text.empty()) toks_.push_back({T::kText, std::move(text), 0, 0, line_});
  }

  // Tokens up to the closing "}}" / "%}"; returns the position after it.
  size_t lex_tag(size_t pos, char close, bool& right_strip) {
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                 "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"};
    const std::string& s = src_;
    int braces = 0;
    while (pos < s.size()) {
      char c = s[pos];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos;
        continue;
      }
      // end of tag, with optional "-" (a "}" closing a dict literal is not the end: braces are balanced)
      if (c == '{') ++braces;
      if (c == '}' && braces > 0) {
        --braces;
        toks_.push_back({T::kOp, "}", 0, 0, line_});
        ++pos;
        continue;
      }
      if (c == '-' && pos + 2 < s.size() && s[pos + 1] == close && s[pos + 2] == '}') {
        right_strip = true;
        toks_.push_back({close == '}' ? T::kVarEnd : T::kBlockEnd, "", 0, 0, line_});
        return pos + 3;
      }
      if (c == close && pos + 1 < s.size() && s[pos + 1] == '}') {
        toks_.push_back({close == '}' ? T::kVarEnd : T::kBlockEnd, "", 0, 0, line_});
        return pos + 2;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos;
        while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
        toks_.push_back({T::kName, s.substr(b, pos - b), 0, 0, line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = pos;
        bool is_float = false;
        while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
        if (pos + 1 < s.size() && s[pos] == '.' && std::isdigit(static_cast<unsigned char>(s[pos + 1]))) {
          is_float = true;
          ++pos;
          while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
        }
        std::string num;
        for (size_t k = b; k < pos; ++k)
          if (s[k] != '_') num += s[k];
        Tok t{is_float ? T::kFloat : T::kInt, num, 0, 0, line_};
        errno = 0;
        if (is_float) t.f = std::strtod(num.c_str(), nullptr);
        else t.i = std::strtoll(num.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(line_, "number literal out of range: " + num);
        toks_.push_back(std::move(t));
        continue;
      }
      if (c == '\'' || c == '"') {
        std::string out;
        ++pos;
        for (;;) {
          if (pos >= s.size()) fail(line_, "unterminated string literal");
          char d = s[pos++];
          if (d == c) break;
          if (d == '\\' && pos < s.size()) {
            // \n \t \r \\ \' \" are escapes; any other backslash stays as written.
            static constexpr std::string_view kEscaped = "ntr\\'\"", kMeans = "\n\t\r\\'\"";
            const char e = s[pos++];
            const size_t k = kEscaped.find(e);
            if (k != std::string_view::npos) {
              out += kMeans[k];
            } else {
              out += '\\';
              out += e;
            }
          } else {
            out += d;
          }
        }
        toks_.push_back({T::kString, std::move(out), 0, 0, line_});
        continue;
      }
      bool matched = false;
      for (const char* op : kOps) {
        size_t n = std::char_traits<char>::length(op);
        if (s.compare(pos, n, op) == 0) {
          toks_.push_back({T::kOp, op, 0, 0, line_});
          pos += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(line_, strfmt("unexpected character '%c' in a tag", c));
    }
    fail(line_, close == '}' ? "unterminated '{{' (add '}}')" : "unterminated '{%' (add '%}')");
  }

  const std::string& src_;
  std::vector<Tok> toks_;
  int line_ = 1;
  size_t line_pos_ = 0;
  int line_count_ = 1;
};

class Parser {
 public:
  Parser(std::vector<Tok> toks, const ParseLimits& lim) : t_(std::move(toks)), lim_(lim) {}

  NodePtr parse_template() {
    std::string end;
    NodePtr body = parse_block({}, end);
    if (peek().type != T::kEof) fail(peek().line, "unexpected content after the end of the template");
    return body;
  }

 private:
  const Tok& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Tok& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == T::kOp && peek(k).s == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == T::kName && peek(k).s == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().line, strfmt("expected '%s' but found '%s'", op, describe(peek()).c_str()));
    ++p_;
  }
  void expect(T type, const char* what) {
    if (peek().type != type) fail(peek().line, strfmt("expected %s but found '%s'", what, describe(peek()).c_str()));
    ++p_;
  }
  std::string expect_name() {
    if (peek().type != T::kName) fail(peek().line, "expected a name but found '" + describe(peek()) + "'");
    return next().s;
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case T::kEof: return "end of template";
      case T::kVarEnd: return "}}";
      case T::kBlockEnd: return "%}";
      case T::kVarBegin: return "{{";
      case T::kBlockBegin: return "{%";
      case T::kText: return "text";
      default: return t.s;
    }
  }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > p.lim_.max_depth)
        fail(p.peek().line, strfmt("template nesting deeper than %d levels", p.lim_.max_depth));
    }
    ~DepthGuard() { --p.depth_; }
  };
  // One more link of a chain (see ParseLimits::max_chain_links); counted per statement or {{ }}.
  void chain_link(int line) {
    if (++chain_links_ > lim_.max_chain_links)
      fail(line, strfmt("an expression with more than %d operators, filters, tests, subscripts and calls in a row "
                        "(each nests it one level deeper); split it with {%% set %%}", lim_.max_chain_links));
  }

  // Statements until one of the `ends` block tags ({% endfor %}, {% else %}, ...); `end` gets the tag name.
  NodePtr parse_block(const std::vector<std::string>& ends, std::string& end) {
    DepthGuard g(*this);
    auto block = std::make_unique<Node>(NodeKind::kBlock, peek().line);
    for (;;) {
      chain_links_ = 0;  // an expression never spans block items: the count restarts with each one
      const Tok& tk = peek();
      if (tk.type == T::kEof) {
        if (!ends.empty()) fail(tk.line, "missing {% " + ends.back() + " %}");
        return block;
      }
      if (tk.type == T::kText) {
        auto n = std::make_unique<Node>(NodeKind::kText, tk.line);
        n->name = tk.s;
        block->kids.push_back(std::move(n));
        ++p_;
        continue;
      }
      if (tk.type == T::kVarBegin) {
        ++p_;
        auto n = std::make_unique<Node>(NodeKind::kOutput, tk.line);
        n->kids.push_back(parse_expr());
        expect(T::kVarEnd, "'}}'");
        block->kids.push_back(std::move(n));
        continue;
      }
      if (tk.type != T::kBlockBegin) fail(tk.line, "unexpected '" + describe(tk) + "'");
      const Tok& kw = peek(1);
      if (kw.type != T::kName) fail(kw.line, "expected a statement name after '{%'");
      for (const auto& e : ends)
        if (kw.s == e) {
          end = e;
          p_ += 2;
          return block;
        }
      p_ += 2;
      block->kids.push_back(parse_statement(kw));
    }
  }

  NodePtr parse_statement(const Tok& kw) {
    int line = kw.line;
    const std::string word = kw.s;
    if (word == "if") {
      auto n = std::make_unique<Node>(NodeKind::kIf, line);
      n->kids.push_back(parse_expr());
      expect(T::kBlockEnd, "'%}'");
      for (;;) {
        std::string end;
        n->kids.push_back(parse_block({"elif", "else", "endif"}, end));
        if (end == "elif") {
          n->kids.push_back(parse_expr());
          expect(T::kBlockEnd, "'%}'");
          continue;
        }
        if (end == "else") {
          expect(T::kBlockEnd, "'%}'");
          n->kids.push_back(parse_block({"endif"}, end));
          n->has_else = true;
        }
        expect(T::kBlockEnd, "'%}'");
        return n;
      }
    }
    if (word == "for") {
      auto n = std::make_unique<Node>(NodeKind::kFor, line);
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        ++p_;
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail(peek().line, "expected 'in' in the for loop");
      ++p_;
      n->kids.push_back(parse_ternary(false));  // no inline "if ... else" here: "if" is the loop filter
      NodePtr filter;
      if (is_name("if")) {
        ++p_;
        filter = parse_or();
      }
      if (is_name("recursive")) fail(peek().line, "recursive loops are not supported");
      expect(T::kBlockEnd, "'%}'");
      std::string end;
      n->kids.push_back(parse_block({"else", "endfor"}, end));
      n->kids.push_back(std::move(filter));
      NodePtr else_block;
      if (end == "else") {
        expect(T::kBlockEnd, "'%}'");
        else_block = parse_block({"endfor"}, end);
      }
      expect(T::kBlockEnd, "'%}'");
      n->kids.push_back(std::move(else_block));
      return n;
    }
    if (word == "set") {
      auto n = std::make_unique<Node>(NodeKind::kSet, line);
      std::string target = expect_name();
      if (is_op(".")) {
        ++p_;
        target += "." + expect_name();
      }
      n->targets.push_back(target);
      while (is_op(",")) {
        ++p_;
        n->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++p_;
        n->kids.push_back(parse_expr());
        expect(T::kBlockEnd, "'%}'");
      } else {
        expect(T::kBlockEnd, "'%}' or '='");
        std::string end;
        n->kids.push_back(parse_block({"endset"}, end));
        expect(T::kBlockEnd, "'%}'");
        n->block_set = true;
      }
      return n;
    }
    if (word == "macro") {
      auto n = std::make_unique<Node>(NodeKind::kMacro, line);
      n->name = expect_name();
      expect_op("(");
      NodeList defaults;
      while (!is_op(")")) {
        n->targets.push_back(expect_name());
        if (is_op("=")) {
          ++p_;
          defaults.push_back(parse_expr());
        } else {
          defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op(")");
      expect(T::kBlockEnd, "'%}'");
      std::string end;
      n->kids.push_back(parse_block({"endmacro"}, end));
      expect(T::kBlockEnd, "'%}'");
      for (auto& d : defaults) n->kids.push_back(std::move(d));
      return n;
    }
    if (word == "break" || word == "continue") {
      expect(T::kBlockEnd, "'%}'");
      return std::make_unique<Node>(word == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    if (word == "generation") {  // HF assistant-mask marker: renders its body unchanged
      expect(T::kBlockEnd, "'%}'");
      std::string end;
      NodePtr body = parse_block({"endgeneration"}, end);
      expect(T::kBlockEnd, "'%}'");
      return body;
    }
    fail(line, "unsupported statement '{% " + word + " %}' (supported: if, for, set, macro, break, continue)");
  }

  // ---- expressions (precedence as in Jinja: ternary < or < and < not < compare < + - < ~ < * / // % < ** < unary)
  NodePtr parse_expr() { return parse_ternary(true); }

  NodePtr parse_ternary(bool allow_if) {
    DepthGuard g(*this);
    NodePtr e = parse_or();
    while (allow_if && is_name("if")) {
      int line = next().line;
      auto n = std::make_unique<Node>(NodeKind::kTernary, line);
      NodePtr cond = parse_or();
      NodePtr other;
      if (is_name("else")) {
        ++p_;
        other = parse_ternary(true);
      }
      n->kids.push_back(std::move(e));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(other));
      e = std::move(n);
    }
    return e;
  }
  NodePtr binary(const std::string& op, NodePtr a, NodePtr b, int line) {
    auto n = std::make_unique<Node>(NodeKind::kBinary, line);
    n->name = op;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }
  // One level of left-associative binary operators: operand (op operand)*. The operators are T::kOp tokens, or
  // T::kName tokens for the word operators (or, and).
  NodePtr parse_level(std::initializer_list<std::string_view> ops, NodePtr (Parser::*operand)(), T op_type = T::kOp) {
    NodePtr e = (this->*operand)();
    for (;;) {
      const Tok& t = peek();
      if (t.type != op_type || std::find(ops.begin(), ops.end(), t.s) == ops.end()) return e;
      chain_link(t.line);
      ++p_;
      e = binary(t.s, std::move(e), (this->*operand)(), t.line);
    }
  }
  NodePtr parse_or() { return parse_level({"or"}, &Parser::parse_and, T::kName); }
  NodePtr parse_and() { return parse_level({"and"}, &Parser::parse_not, T::kName); }
  NodePtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto n = std::make_unique<Node>(NodeKind::kUnary, next().line);
      n->name = "not";
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }
  NodePtr parse_compare() {
    NodePtr e = parse_add();
    for (;;) {
      int line = peek().line;
      std::string op;
      if (peek().type == T::kOp && (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" ||
                                    peek().s == "<=" || peek().s == ">=")) {
        op = next().s;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        op = "not in";
      } else {
        return e;
      }
      chain_link(line);
      e = binary(op, std::move(e), parse_add(), line);
    }
  }
  NodePtr parse_add() { return parse_level({"+", "-"}, &Parser::parse_concat); }
  NodePtr parse_concat() { return parse_level({"~"}, &Parser::parse_mul); }
  NodePtr parse_mul() { return parse_level({"*", "/", "//", "%"}, &Parser::parse_pow); }
  NodePtr parse_pow() { return parse_level({"**"}, &Parser::parse_unary); }
  NodePtr parse_unary() {
    DepthGuard g(*this);
    if (is_op("-") || is_op("+")) {
      const Tok& t = next();
      auto n = std::make_unique<Node>(NodeKind::kUnary, t.line);
      n->name = t.s;
      n->kids.push_back(parse_unary());
      return parse_filters(std::move(n));
    }
    return parse_filters(parse_postfix(parse_primary()));
  }

  // Call arguments after "(": positional then keyword (name=value).
  void parse_args(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == T::kName && is_op("=", 1)) {
        n.kwarg_names.push_back(next().s);
        ++p_;
        n.kids.push_back(parse_expr());
      } else {
        if (!n.kwarg_names.empty()) fail(peek().line, "positional argument after a keyword argument");
        n.kids.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  NodePtr parse_filters(NodePtr e) {
    for (;;) {
      if (is_op("|")) {
        int line = next().line;
        chain_link(line);
        auto n = std::make_unique<Node>(NodeKind::kFilter, line);
        n->name = expect_name();
        n->kids.push_back(std::move(e));
        if (is_op("(")) parse_args(*n);
        e = parse_postfix(std::move(n));
      } else if (is_name("is")) {
        int line = next().line;
        chain_link(line);
        auto n = std::make_unique<Node>(NodeKind::kTest, line);
        if (is_name("not")) {
          ++p_;
          n->negated = true;
        }
        n->name = expect_name();
        n->kids.push_back(std::move(e));
        if (is_op("(")) {
          parse_args(*n);
        } else if (peek().type == T::kString || peek().type == T::kInt || peek().type == T::kFloat ||
                   (peek().type == T::kName && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is"))) {
          n->kids.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  NodePtr parse_postfix(NodePtr e) {
    for (;;) {
      int line = peek().line;
      if (is_op(".") || is_op("[") || is_op("(")) chain_link(line);
      if (is_op(".")) {
        ++p_;
        auto n = std::make_unique<Node>(NodeKind::kGetAttr, line);
        if (peek().type == T::kInt) {  // foo.0
          n->kind = NodeKind::kGetItem;
          n->kids.push_back(std::move(e));
          auto lit = std::make_unique<Node>(NodeKind::kLiteral, line);
          lit->value = Value(next().i);
          n->kids.push_back(std::move(lit));
        } else {
          n->name = expect_name();
          n->kids.push_back(std::move(e));
        }
        e = std::move(n);
      } else if (is_op("[")) {
        ++p_;
        NodePtr parts[3];
        int colons = 0;
        for (;;) {
          if (is_op(":")) {
            ++p_;
            if (++colons > 2) fail(line, "too many ':' in a slice");
            continue;
          }
          if (is_op("]")) break;
          if (parts[colons]) fail(line, "expected ':' or ']' in a subscript");
          parts[colons] = parse_expr();
        }
        ++p_;
        if (colons == 0) {
          if (!parts[0]) fail(line, "empty subscript []");
          auto n = std::make_unique<Node>(NodeKind::kGetItem, line);
          n->kids.push_back(std::move(e));
          n->kids.push_back(std::move(parts[0]));
          e = std::move(n);
        } else {
          auto n = std::make_unique<Node>(NodeKind::kSlice, line);
          n->kids.push_back(std::move(e));
          for (auto& p : parts) n->kids.push_back(std::move(p));
          e = std::move(n);
        }
      } else if (is_op("(")) {
        auto n = std::make_unique<Node>(NodeKind::kCall, line);
        n->kids.push_back(std::move(e));
        parse_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }

  NodePtr parse_primary() {
    DepthGuard g(*this);
    const Tok& t = next();
    auto lit = [&](Value v) {
      auto n = std::make_unique<Node>(NodeKind::kLiteral, t.line);
      n->value = std::move(v);
      return n;
    };
    switch (t.type) {
      case T::kString: {
        std::string s = t.s;
        while (peek().type == T::kString) s += next().s;  // adjacent literals concatenate
        return lit(Value(std::move(s)));
      }
      case T::kInt: return lit(Value(t.i));
      case T::kFloat: return lit(Value(t.f));
      case T::kName: {
        if (t.s == "true" || t.s == "True") return lit(Value(true));
        if (t.s == "false" || t.s == "False") return lit(Value(false));
        if (t.s == "none" || t.s == "None") return lit(Value::none());
        auto n = std::make_unique<Node>(NodeKind::kName, t.line);
        n->name = t.s;
        return n;
      }
      case T::kOp:
        if (t.s == "(") {
          NodePtr e = parse_expr();
          if (is_op(",")) {  // tuple
            auto n = std::make_unique<Node>(NodeKind::kTuple, t.line);
            n->kids.push_back(std::move(e));
            while (is_op(",")) {
              ++p_;
              if (is_op(")")) break;
              n->kids.push_back(parse_expr());
            }
            e = std::move(n);
          }
          expect_op(")");
          return e;
        }
        if (t.s == "[" || t.s == "{") {  // [a, b, ...] or {k: v, ...}; a trailing comma is allowed
          const bool dict = t.s == "{";
          const char* close = dict ? "}" : "]";
          auto n = std::make_unique<Node>(dict ? NodeKind::kDict : NodeKind::kList, t.line);
          while (!is_op(close)) {
            n->kids.push_back(parse_expr());
            if (dict) {
              expect_op(":");
              n->kids.push_back(parse_expr());
            }
            if (!is_op(",")) break;
            ++p_;
          }
          expect_op(close);
          return n;
        }
        break;
      default: break;
    }
    fail(t.line, "unexpected '" + describe(t) + "' in an expression");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  const ParseLimits& lim_;
  int depth_ = 0;
  int chain_links_ = 0;
};

}  // namespace

NodePtr parse(const std::string& source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    throw Error(strfmt("template is %zu bytes, more than the limit of %zu", source.size(), limits.max_source_bytes));
  Lexer lex(source);
  Parser p(lex.run(), limits);
  return p.parse_template();
}

}  // namespace mopt::jinja
