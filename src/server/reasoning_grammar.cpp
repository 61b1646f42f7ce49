#include "server/reasoning_grammar.h"

#include <set>
#include <utility>

#include "engine/grammar/text_without.h"

namespace mopt::server {
namespace {

using grammar::Expr;

void rename_refs(Expr& e, const std::string& from, const std::string& to) {
  if (e.kind == Expr::Kind::kRef && e.text == from) e.text = to;
  for (Expr& k : e.kids) rename_refs(k, from, to);
}

}  // namespace

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
  for (grammar::Rule& r : grammar::text_without("</think>", prefix)) g.rules.push_back(std::move(r));
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
