// Random grammars for the grammar tests: 1-4 rules over a few characters (ASCII, two-byte é, three-byte €), with
// literals, classes (some complemented), repetitions of characters, classes and rules, alternatives and references
// (recursion only after a consumed byte, so there is no left recursion, and every rule matches something).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "engine/grammar/expr.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar::testing {

// Characters of the random grammars: ASCII, two-byte é and three-byte €.
inline const char* const kChars[] = {"a", "b", "c", "{", "\xC3\xA9", "\xE2\x82\xAC"};

class RandomGrammar {
 public:
  explicit RandomGrammar(uint64_t seed) : rng_(seed) {}

  Grammar make() {
    Grammar g;
    const int n_rules = 1 + static_cast<int>(rng_.next() % 4);
    for (int r = 0; r < n_rules; ++r) {
      current_ = r;
      n_rules_ = n_rules;
      std::vector<Expr> alts;
      alts.push_back(Expr::literal(chr()));  // every rule matches something
      const int n_alts = static_cast<int>(rng_.next() % 3);
      for (int a = 0; a < n_alts; ++a) alts.push_back(seq(2));
      g.rules.push_back({rule_name(r), Expr::alt(std::move(alts))});
    }
    return g;
  }

 private:
  static std::string rule_name(int r) {
    std::string name = r == 0 ? "root" : "r";
    if (r > 0) name.append(std::to_string(r));
    return name;
  }
  std::string chr() { return kChars[rng_.next() % 6]; }

  // A sequence whose first item consumes a byte, so references to rules <= current (recursion) come after it.
  Expr seq(int depth) {
    std::vector<Expr> items;
    items.push_back(Expr::literal(chr()));
    const int n = static_cast<int>(rng_.next() % 3);
    for (int i = 0; i < n; ++i) items.push_back(item(depth, true));
    return Expr::seq(std::move(items));
  }

  Expr item(int depth, bool after_byte) {
    switch (rng_.next() % (depth > 0 ? 7 : 4)) {
      case 0: return Expr::literal(chr() + (rng_.next() % 2 ? chr() : ""));
      case 1: {
        CodeSet s;
        for (int k = 0; k < 2; ++k) {
          uni::Decoded d = uni::decode(chr(), 0);
          s.push_back({d.cp, d.cp});
        }
        return Expr::cls(rng_.next() % 4 == 0 ? complement(s) : s);
      }
      case 2:
      case 3: {
        // references: to later rules anywhere, to earlier ones (or itself) only after a consumed byte
        int lo = after_byte ? 0 : current_ + 1;
        if (lo >= n_rules_) return Expr::literal(chr());
        int r = lo + static_cast<int>(rng_.next() % static_cast<uint64_t>(n_rules_ - lo));
        return Expr::ref(rule_name(r));
      }
      case 4: {
        static const int kBounds[][2] = {{0, -1}, {1, -1}, {0, 1}, {2, 3}, {0, 2}};
        const auto& b = kBounds[rng_.next() % 5];
        // a repeated character, class or rule (a small rule repeated without bound is inlined: automaton.cpp)
        Expr body = rng_.next() % 3 == 0 ? Expr::literal(chr()) : item(0, after_byte);
        return Expr::repeat(std::move(body), b[0], b[1]);
      }
      case 5: return Expr::alt({item(depth - 1, after_byte), item(depth - 1, after_byte), Expr::empty()});
      default: return Expr::seq({item(depth - 1, after_byte), item(depth - 1, after_byte)});
    }
  }

  Xoshiro256 rng_;
  int current_ = 0, n_rules_ = 1;
};

}  // namespace mopt::grammar::testing
