// An independent, deliberately simple recognizer for grammar::Grammar, the oracle of the mask tests. It works on
// the expression tree directly (no automata, no stacks): memoized sets of end offsets per (expression, offset), and
// "viable": the input from an offset on is a prefix of some text the expression matches. Exponential in the worst
// case and slow; fine for short inputs. Needs a grammar without left recursion whose rules all match something.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/grammar/expr.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar::testing {

class Recognizer {
 public:
  explicit Recognizer(const Grammar& g) : g_(g) {
    for (const Rule& r : g.rules) rules_[r.name] = &r.body;
  }

  // The whole input is a text of the grammar.
  bool accepts(const std::string& in) {
    reset(in);
    return ends(*rules_.at(g_.root), 0).count(in.size()) > 0;
  }
  // The input is a prefix of some text of the grammar.
  bool viable(const std::string& in) {
    reset(in);
    return pre(*rules_.at(g_.root), 0);
  }
  // Some longer text of the grammar starts with the input.
  bool viable_continuation(const std::string& in) {
    for (int b = 0; b < 256; ++b)
      if (viable(in + static_cast<char>(b))) return true;
    return false;
  }

 private:
  void reset(const std::string& in) {
    in_ = in;
    memo_ends_.clear();
    memo_pre_.clear();
  }
  size_t n() const { return in_.size(); }

  // Offsets j such that e matches in_[i, j).
  std::set<size_t> ends(const Expr& e, size_t i) {
    auto key = std::make_pair(&e, i);
    if (auto it = memo_ends_.find(key); it != memo_ends_.end()) return it->second;
    std::set<size_t> out;
    switch (e.kind) {
      case Expr::Kind::kEmpty: out.insert(i); break;
      case Expr::Kind::kLiteral:
        if (in_.compare(i, e.text.size(), e.text) == 0 && i + e.text.size() <= n()) out.insert(i + e.text.size());
        break;
      case Expr::Kind::kClass: {
        if (i < n()) {
          uni::Decoded d = uni::decode(in_, i);
          if (d.valid && d.len > 0 && contains(e.set, d.cp)) out.insert(i + d.len);
        }
        break;
      }
      case Expr::Kind::kRef: out = ends(*rules_.at(e.text), i); break;
      case Expr::Kind::kSeq: {
        std::set<size_t> cur{i};
        for (const Expr& k : e.kids) {
          std::set<size_t> nxt;
          for (size_t j : cur)
            for (size_t x : ends(k, j)) nxt.insert(x);
          cur = std::move(nxt);
        }
        out = std::move(cur);
        break;
      }
      case Expr::Kind::kAlt:
        for (const Expr& k : e.kids)
          for (size_t x : ends(k, i)) out.insert(x);
        break;
      case Expr::Kind::kRepeat: {
        // count = number of repetitions done; frontier of (offset) per count
        std::set<size_t> cur{i};
        if (e.min == 0) out.insert(i);
        const int limit = e.max < 0 ? static_cast<int>(n() - i) + e.min + 1 : e.max;
        for (int c = 1; c <= limit && !cur.empty(); ++c) {
          std::set<size_t> nxt;
          for (size_t j : cur)
            for (size_t x : ends(e.kids[0], j))
              if (x > j || c <= e.min) nxt.insert(x);  // beyond min, empty iterations add nothing
          cur = std::move(nxt);
          if (c >= e.min)
            for (size_t x : cur) out.insert(x);
        }
        break;
      }
    }
    memo_ends_[key] = out;
    return out;
  }

  // in_[i, n) is a prefix of some text e matches (e's rules all match something, so "in progress" suffices).
  bool pre(const Expr& e, size_t i) {
    if (i == n()) return true;
    auto key = std::make_pair(&e, i);
    if (auto it = memo_pre_.find(key); it != memo_pre_.end()) return it->second;
    bool out = false;
    switch (e.kind) {
      case Expr::Kind::kEmpty: out = false; break;
      case Expr::Kind::kLiteral: {
        const size_t m = std::min(e.text.size(), n() - i);
        out = in_.compare(i, m, e.text, 0, m) == 0 && n() - i <= e.text.size();
        break;
      }
      case Expr::Kind::kClass: {
        // The remaining bytes are one whole character of the set, or the start of the encoding of one: the code
        // points whose encoding starts with them form a range, cut to the values of that encoding length.
        const size_t rest = n() - i;
        const uint8_t lead = static_cast<uint8_t>(in_[i]);
        const size_t len = lead < 0x80 ? 1 : lead >= 0xC2 && lead < 0xE0 ? 2 : lead >= 0xE0 && lead < 0xF0 ? 3
                         : lead >= 0xF0 && lead < 0xF5 ? 4 : 0;
        if (len == 0 || rest > len) break;
        uint32_t bits = len == 1 ? lead : len == 2 ? (lead & 0x1F) : len == 3 ? (lead & 0x0F) : (lead & 0x07);
        bool cont_ok = true;
        for (size_t k = 1; k < rest; ++k) {
          const uint8_t c = static_cast<uint8_t>(in_[i + k]);
          cont_ok = cont_ok && (c & 0xC0) == 0x80;
          bits = (bits << 6) | (c & 0x3F);
        }
        if (!cont_ok) break;
        const int missing = static_cast<int>(len - rest);
        uint32_t lo = bits << (6 * missing), hi = lo | ((1u << (6 * missing)) - 1);
        const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000}, max_cp[] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
        lo = std::max(lo, min_cp[len]);
        hi = std::min(hi, max_cp[len]);
        for (const CodeRange& r : e.set) {
          // [max(lo, r.lo), min(hi, r.hi)] minus the surrogates
          const uint32_t a = std::max(lo, r.lo), b = std::min(hi, r.hi);
          if (a > b) continue;
          if (!(a >= 0xD800 && b <= 0xDFFF)) out = true;
        }
        break;
      }
      case Expr::Kind::kRef: out = pre(*rules_.at(e.text), i); break;
      case Expr::Kind::kSeq: {
        std::set<size_t> cur{i};
        for (const Expr& k : e.kids) {
          for (size_t j : cur)
            if (pre(k, j)) out = true;
          if (out) break;
          std::set<size_t> nxt;
          for (size_t j : cur)
            for (size_t x : ends(k, j)) nxt.insert(x);
          cur = std::move(nxt);
        }
        break;
      }
      case Expr::Kind::kAlt:
        for (const Expr& k : e.kids) out = out || pre(k, i);
        break;
      case Expr::Kind::kRepeat: {
        std::set<size_t> cur{i};
        const int limit = e.max < 0 ? static_cast<int>(n() - i) + e.min + 1 : e.max;
        for (int c = 1; c <= limit && !cur.empty() && !out; ++c) {
          std::set<size_t> nxt;
          for (size_t j : cur) {
            if (pre(e.kids[0], j)) out = true;
            for (size_t x : ends(e.kids[0], j))
              if (x > j || c <= e.min) nxt.insert(x);
          }
          cur = std::move(nxt);
        }
        break;
      }
    }
    memo_pre_[key] = out;
    return out;
  }

  const Grammar& g_;
  std::map<std::string, const Expr*> rules_;
  std::string in_;
  std::map<std::pair<const Expr*, size_t>, std::set<size_t>> memo_ends_;
  std::map<std::pair<const Expr*, size_t>, bool> memo_pre_;
};

}  // namespace mopt::grammar::testing
