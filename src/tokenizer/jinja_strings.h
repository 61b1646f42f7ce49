// Internal: the str methods of the Jinja subset, with Python's semantics (s.strip(), s.split(), s.title(), ...), and
// the string helpers the filters share with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace mopt::jinja {

// Evaluated call arguments: positional ones, then keyword ones.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(size_t i, const char* name) const {
    if (i < pos.size()) return &pos[i];
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

// Throws Error("template line <n.line>: <msg>").
[[noreturn]] void fail(const Node& n, const std::string& msg);

// Python's str.strip / lstrip / rstrip: drops the characters of `chars` (a string) or, without it, whitespace.
std::string strip(const std::string& s, const Value* chars, bool left, bool right);
std::string capitalize(const std::string& s);  // first character upper case, the rest lower case
std::string title(const std::string& s);       // every word capitalized
// s with `from` replaced by `to`, the first `count` times (count < 0: all); throws past max_out bytes.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        size_t max_out);
// Python's str.split(sep=None, maxsplit=-1).
List split(const Node& n, const std::string& s, const Args& a);

// s.<m>(a) for the str methods of the subset; nullopt when str has no method m. Results are bounded by max_out bytes.
std::optional<Value> call_str_method(const Node& n, const std::string& s, const std::string& m, const Args& a,
                                     size_t max_out);

}  // namespace mopt::jinja
