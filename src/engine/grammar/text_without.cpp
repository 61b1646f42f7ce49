#include "engine/grammar/text_without.h"

#include <algorithm>
#include <set>

#include "tokenizer/unicode.h"

namespace mopt::grammar {
namespace {

// The state after reading c in state i of the marker's matching automaton: the longest prefix of the marker that is
// a suffix of marker[0, i) + c (i + 1 when c continues the match).
size_t advance(const std::vector<uint32_t>& marker, size_t i, uint32_t c) {
  std::vector<uint32_t> seen(marker.begin(), marker.begin() + static_cast<std::ptrdiff_t>(i));
  seen.push_back(c);
  for (size_t n = std::min(seen.size(), marker.size()); n > 0; --n)
    if (std::equal(seen.end() - static_cast<std::ptrdiff_t>(n), seen.end(), marker.begin())) return n;
  return 0;
}

}  // namespace

std::vector<Rule> text_without(const std::string& marker, const std::string& prefix) {
  std::vector<uint32_t> cps;  // the marker's code points
  for (size_t i = 0; i < marker.size();) {
    const uni::Decoded d = uni::decode(marker, i);
    cps.push_back(d.cp);
    i += std::max<size_t>(d.len, 1);
  }
  const std::set<uint32_t> chars(cps.begin(), cps.end());
  CodeSet in_marker;
  for (uint32_t c : chars) in_marker.push_back({c, c});
  const Expr other = Expr::cls(complement(normalize(in_marker)));
  auto name = [&](size_t i) { return prefix + std::to_string(i); };
  std::vector<Rule> rules;
  for (size_t i = 0; i < cps.size(); ++i) {
    std::vector<Expr> alts{Expr::empty(), Expr::seq({other, Expr::ref(name(0))})};
    for (uint32_t c : chars) {
      const size_t j = advance(cps, i, c);
      if (j == cps.size()) continue;  // the marker itself: not allowed
      std::string utf8;
      uni::append_utf8(utf8, c);
      alts.push_back(Expr::seq({Expr::literal(utf8), Expr::ref(name(j))}));
    }
    rules.push_back({name(i), Expr::alt(std::move(alts))});
  }
  return rules;
}

}  // namespace mopt::grammar
