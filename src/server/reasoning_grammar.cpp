#include "server/reasoning_grammar.h"

#include <set>
#include <utility>

namespace mopt::server {
namespace {

using grammar::Expr;

// The state after reading c in state i of the marker's matching automaton: the longest prefix of the marker that is
// a suffix of marker[0, i) + c (i + 1 when c continues the match).
size_t advance(const std::string& marker, size_t i, char c) {
  const std::string seen = marker.substr(0, i) + c;
  for (size_t n = std::min(seen.size(), marker.size()); n > 0; --n)
    if (seen.compare(seen.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

void rename_refs(Expr& e, const std::string& from, const std::string& to) {
  if (e.kind == Expr::Kind::kRef && e.text == from) e.text = to;
  for (Expr& k : e.kids) rename_refs(k, from, to);
}

}  // namespace

std::vector<grammar::Rule> text_without(const std::string& marker, const std::string& prefix) {
  std::set<char> chars(marker.begin(), marker.end());
  grammar::CodeSet in_marker;
  for (char c : chars) in_marker.push_back({static_cast<uint32_t>(c), static_cast<uint32_t>(c)});
  const Expr other = Expr::cls(grammar::complement(grammar::normalize(in_marker)));
  auto name = [&](size_t i) { return prefix + std::to_string(i); };
  std::vector<grammar::Rule> rules;
  for (size_t i = 0; i < marker.size(); ++i) {
    std::vector<Expr> alts{Expr::empty(), Expr::seq({other, Expr::ref(name(0))})};
    for (char c : chars) {
      const size_t j = advance(marker, i, c);
      if (j == marker.size()) continue;  // the marker itself: not allowed
      alts.push_back(Expr::seq({Expr::literal(std::string(1, c)), Expr::ref(name(j))}));
    }
    rules.push_back({name(i), Expr::alt(std::move(alts))});
  }
  return rules;
}

grammar::Grammar grammar_after_reasoning(ReasoningKind kind, bool prompt_in_thinking, grammar::Grammar g) {
  if (kind == ReasoningKind::kNone) return g;
  std::set<std::string> names;
  for (const grammar::Rule& r : g.rules) names.insert(r.name);
  std::string prefix = "mopt-think-";
  for (int n = 2; names.count(prefix + "answer") || names.count(prefix + "0"); ++n)
    prefix = "mopt-think" + std::to_string(n) + "-";
  const std::string answer = prefix + "answer";
  for (grammar::Rule& r : g.rules) {
    if (r.name == g.root) r.name = answer;
    rename_refs(r.body, g.root, answer);
  }
  for (grammar::Rule& r : text_without("</think>", prefix)) g.rules.push_back(std::move(r));
  const Expr ws = Expr::repeat(Expr::cls({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}), 0, 8);
  const Expr think = Expr::ref(prefix + "0"), close = Expr::literal("</think>"), open = Expr::literal("<think>");
  Expr root;
  if (kind == ReasoningKind::kDeepSeekR1) {
    root = Expr::seq({ws, Expr::repeat(open, 0, 1), think, close, ws, Expr::ref(answer)});
  } else if (prompt_in_thinking) {
    root = Expr::seq({think, close, ws, Expr::ref(answer)});
  } else {
    root = Expr::alt({Expr::seq({ws, open, think, close, ws, Expr::ref(answer)}), Expr::ref(answer)});
  }
  g.rules.push_back({"root", std::move(root)});
  g.root = "root";
  return g;
}

}  // namespace mopt::server
