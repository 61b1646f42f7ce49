#include "engine/grammar/expr.h"

#include <algorithm>

#include "core/strfmt.h"

namespace mopt::grammar {

CodeSet normalize(CodeSet s) {
  std::sort(s.begin(), s.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  CodeSet out;
  for (const CodeRange& r : s) {
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodeSet complement(const CodeSet& s) {
  CodeSet out;
  uint32_t next = 0;
  for (const CodeRange& r : normalize(s)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

bool contains(const CodeSet& s, uint32_t cp) {
  auto it = std::upper_bound(s.begin(), s.end(), cp, [](uint32_t c, const CodeRange& r) { return c < r.lo; });
  return it != s.begin() && std::prev(it)->hi >= cp;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int parse_repeat_count(std::string_view s, size_t& pos, std::string& error) {
  const size_t start = pos;
  long v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    v = v * 10 + (s[pos] - '0');
    if (v > kMaxRepeat) {
      error = "repetition count above " + std::to_string(kMaxRepeat);
      return -1;
    }
    ++pos;
  }
  if (pos == start) {
    error = "expected a number in the repetition {m,n}";
    return -1;
  }
  return static_cast<int>(v);
}

Expr Expr::literal(std::string bytes) {
  Expr e;
  e.kind = Kind::kLiteral;
  e.text = std::move(bytes);
  return e;
}

Expr Expr::cls(CodeSet s) {
  Expr e;
  e.kind = Kind::kClass;
  e.set = normalize(std::move(s));
  return e;
}

Expr Expr::ref(std::string name) {
  Expr e;
  e.kind = Kind::kRef;
  e.text = std::move(name);
  return e;
}

Expr Expr::seq(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = kids.empty() ? Kind::kEmpty : Kind::kSeq;
  e.kids = std::move(kids);
  return e;
}

Expr Expr::alt(std::vector<Expr> kids) {
  if (kids.size() == 1) return std::move(kids[0]);
  Expr e;
  e.kind = Kind::kAlt;
  e.kids = std::move(kids);
  return e;
}

Expr Expr::repeat(Expr child, int min, int max) {
  Expr e;
  e.kind = Kind::kRepeat;
  e.kids.push_back(std::move(child));
  e.min = min;
  e.max = max;
  return e;
}

namespace {

// One code point inside a GBNF literal (quote = '"') or character class (quote = ']').
void escape_cp(std::string& out, uint32_t cp, char quote) {
  switch (cp) {
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\\': out += "\\\\"; return;
    default: break;
  }
  if (cp == static_cast<uint32_t>(quote) || (quote == ']' && (cp == '[' || cp == '^' || cp == '-'))) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp >= 0x20 && cp < 0x7F) {
    out += static_cast<char>(cp);
  } else if (cp < 0x100) {
    out += strfmt("\\x%02X", cp);
  } else if (cp < 0x10000) {
    out += strfmt("\\u%04X", cp);
  } else {
    out += strfmt("\\U%08X", cp);
  }
}

bool atomic(const Expr& e) {
  return e.kind == Expr::Kind::kLiteral || e.kind == Expr::Kind::kClass || e.kind == Expr::Kind::kRef ||
         e.kind == Expr::Kind::kEmpty;
}

void print(std::string& out, const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kEmpty: out += "\"\""; return;
    case Expr::Kind::kLiteral: out += gbnf_literal(e.text); return;
    case Expr::Kind::kRef: out += e.text; return;
    case Expr::Kind::kClass: {
      out += '[';
      for (const CodeRange& r : e.set) {
        escape_cp(out, r.lo, ']');
        if (r.hi > r.lo) {
          if (r.hi > r.lo + 1) out += '-';
          escape_cp(out, r.hi, ']');
        }
      }
      if (e.set.empty()) out += "^\\x00-\\U0010FFFF";  // matches nothing
      out += ']';
      return;
    }
    case Expr::Kind::kSeq:
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i) out += ' ';
        const bool paren = e.kids[i].kind == Expr::Kind::kAlt;
        if (paren) out += '(';
        print(out, e.kids[i]);
        if (paren) out += ')';
      }
      return;
    case Expr::Kind::kAlt:
      for (size_t i = 0; i < e.kids.size(); ++i) {
        if (i) out += " | ";
        print(out, e.kids[i]);
      }
      return;
    case Expr::Kind::kRepeat: {
      const Expr& c = e.kids[0];
      if (atomic(c)) {
        print(out, c);
      } else {
        out += '(';
        print(out, c);
        out += ')';
      }
      if (e.min == 0 && e.max == -1) out += '*';
      else if (e.min == 1 && e.max == -1) out += '+';
      else if (e.min == 0 && e.max == 1) out += '?';
      else if (e.max == -1) out += strfmt("{%d,}", e.min);
      else if (e.min == e.max) out += strfmt("{%d}", e.min);
      else out += strfmt("{%d,%d}", e.min, e.max);
      return;
    }
  }
}

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c >= 0x80) {
      out += static_cast<char>(c);  // UTF-8 passes through; the parser reads it back as code points
    } else {
      escape_cp(out, c, '"');
    }
  }
  out += '"';
  return out;
}

std::string print_gbnf(const Expr& e) {
  std::string out;
  print(out, e);
  return out;
}

std::string print_gbnf(const Grammar& g) {
  std::string out;
  for (const Rule& r : g.rules) {
    out += r.name;
    out += " ::= ";
    print(out, r.body);
    out += '\n';
  }
  return out;
}

}  // namespace mopt::grammar
