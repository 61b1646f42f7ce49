#include "tokenizer/jinja_strings.h"

#include <cctype>

#include "core/strings.h"

namespace mopt::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto in_set = [&](char c) {
    if (chars && chars->is_string()) return chars->str().find(c) != std::string::npos;
    return is_space(c);
  };
  size_t b = 0, e = s.size();
  if (left) while (b < e && in_set(s[b])) ++b;
  if (right) while (e > b && in_set(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string capitalize(const std::string& s) {
  std::string r = lower(s);
  if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
  return r;
}
std::string title(const std::string& s) {
  std::string r = s;
  bool start = true;
  for (auto& c : r) {
    unsigned char u = static_cast<unsigned char>(c);
    c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = !std::isalnum(u);
  }
  return r;
}
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        size_t max_out) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, pos, f - pos);
    out += to;
    if (out.size() > max_out) throw Error("replace(): result exceeds the output limit");
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

List split(const Node& n, const std::string& s, const Args& a) {
  const Value* sep = a.get(0, "sep");
  const Value* maxv = a.get(1, "maxsplit");
  int64_t maxsplit = maxv && maxv->is_int() ? maxv->as_int() : -1;
  List parts;
  if (!sep || sep->is_none()) {  // runs of whitespace
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.emplace_back(strip(s.substr(i), nullptr, false, true));
        break;
      }
      size_t b = i;
      while (i < s.size() && !is_space(s[i])) ++i;
      parts.emplace_back(s.substr(b, i - b));
    }
    return parts;
  }
  if (!sep->is_string() || sep->str().empty()) fail(n, "split() separator must be a non-empty string");
  size_t pos = 0;
  for (;;) {
    size_t f = s.find(sep->str(), pos);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) break;
    parts.emplace_back(s.substr(pos, f - pos));
    pos = f + sep->str().size();
  }
  parts.emplace_back(s.substr(pos));
  return parts;
}

std::optional<Value> call_str_method(const Node& n, const std::string& s, const std::string& m, const Args& a,
                                     size_t max_out) {
  if (m == "strip") return Value(strip(s, a.get(0, "chars"), true, true));
  if (m == "lstrip") return Value(strip(s, a.get(0, "chars"), true, false));
  if (m == "rstrip") return Value(strip(s, a.get(0, "chars"), false, true));
  if (m == "upper") return Value(upper(s));
  if (m == "lower") return Value(lower(s));
  if (m == "title") return Value(title(s));
  if (m == "capitalize") return Value(capitalize(s));
  if (m == "startswith" || m == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) fail(n, m + "() needs an argument");
    List opts = p->is_list() ? p->list() : List{*p};
    for (const auto& o : opts) {
      if (!o.is_string()) fail(n, m + "() needs a string");
      const std::string& x = o.str();
      bool hit = m == "startswith" ? s.compare(0, x.size(), x) == 0
                                   : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (m == "split") return Value(split(n, s, a));
  if (m == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    const Value* cnt = a.get(2, "count");
    if (!from || !to || !from->is_string() || !to->is_string()) fail(n, "replace() needs two strings");
    return Value(replace_all(s, from->str(), to->str(), cnt && cnt->is_int() ? cnt->as_int() : -1, max_out));
  }
  if (m == "find" || m == "count") {
    const Value* x = a.get(0, "sub");
    if (!x || !x->is_string()) fail(n, m + "() needs a string");
    if (m == "find") {
      size_t f = s.find(x->str());
      return Value(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(f));
    }
    if (x->str().empty()) return Value(static_cast<int64_t>(s.size() + 1));
    int64_t c = 0;
    for (size_t p = s.find(x->str()); p != std::string::npos; p = s.find(x->str(), p + x->str().size())) ++c;
    return Value(c);
  }
  return std::nullopt;
}

}  // namespace mopt::jinja
