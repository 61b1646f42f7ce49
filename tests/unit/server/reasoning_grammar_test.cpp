// A constraint applies after the think block when a reasoning parser is on (reasoning_grammar.h): the wrapped
// grammar accepts exactly "think block as the parser reads it, then a text of the answer grammar", and the parser
// splits each accepted text where the grammar does.
#include <gtest/gtest.h>

#include "engine/grammar/gbnf.h"
#include "server/reasoning_grammar.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::server {
namespace {

using grammar::testing::byte_vocab;
using grammar::testing::classify;

std::shared_ptr<grammar::CompiledGrammar> compile_bytes(const grammar::Grammar& g) {
  auto c = grammar::CompiledGrammar::compile(g, byte_vocab());
  EXPECT_TRUE(c) << c.message() << "\n" << grammar::print_gbnf(g);
  return c ? *c : nullptr;
}

// 1 / 0 / -1 as classify(), and for accepted texts the parser's split (reasoning, content).
struct Outcome {
  int cls;
  std::string reasoning, content;
};

Outcome run(ReasoningKind kind, bool open, const std::string& text) {
  auto answer = grammar::parse_gbnf("root ::= \"{\" word \"}\"\nword ::= [a-z]+\nmopt-think-0 ::= \"x\"\n");
  EXPECT_TRUE(answer) << answer.message();
  auto cg = compile_bytes(grammar_after_reasoning(kind, open, *answer));
  Outcome o{cg ? classify(*cg, text) : -2, "", ""};
  ReasoningParser p(kind, open);
  ReasoningDelta a = p.feed(text), b = p.finish();
  o.reasoning = a.reasoning + b.reasoning;
  o.content = a.content + b.content;
  return o;
}

TEST(ReasoningGrammar, AnswerAfterTheThinkBlock) {
  const auto R1 = ReasoningKind::kDeepSeekR1, Q3 = ReasoningKind::kQwen3;
  struct Case {
    ReasoningKind kind;
    bool open;
    std::string text;
    int cls;
    std::string reasoning, content;  // when cls == 1
  };
  const Case cases[] = {
      {R1, true, "I think </b> so</think>\n\n{ok}", 1, "I think </b> so", "\n\n{ok}"},
      {R1, false, "<think>\nhm</think>{ok}", 1, "\nhm", "{ok}"},
      {R1, false, "</think>{ok}", 1, "", "{ok}"},
      {R1, true, "{ok}", 0, "", ""},                      // the answer only after </think>
      {R1, true, "a</think>b</think>{ok}", -1, "", ""},   // the block ends at the first </think>
      {R1, true, "a</think>{ok} more", -1, "", ""},
      {Q3, true, "plan</think>\n{ok}", 1, "plan", "\n{ok}"},
      {Q3, true, "{ok}", 0, "", ""},
      {Q3, false, "{ok}", 1, "", "{ok}"},                 // thinking is optional
      {Q3, false, "\n<think>\nstep\n</think>\n\n{ok}", 1, "\nstep\n", "\n\n{ok}"},
      {Q3, false, "step</think>{ok}", -1, "", ""},
      {Q3, false, "<think>{ok}", 0, "", ""},              // inside the block: the answer is still to come
  };
  for (const Case& c : cases) {
    Outcome o = run(c.kind, c.open, c.text);
    EXPECT_EQ(o.cls, c.cls) << reasoning_parser_name(c.kind) << (c.open ? " open: '" : ": '") << c.text << "'";
    if (c.cls == 1) {
      EXPECT_EQ(o.reasoning, c.reasoning) << c.text;
      EXPECT_EQ(o.content, c.content) << c.text;
    }
  }
}

}  // namespace
}  // namespace mopt::server
