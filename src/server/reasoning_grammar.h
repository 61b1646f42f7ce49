// Structured output with a reasoning parser: the constraint applies to the answer, not to the thinking before it
// (as vLLM does with --reasoning-parser). A grammar for the answer gets a new start rule that first lets the model
// write its think block the way the parser (reasoning.h) will read it:
//
//   deepseek_r1             : [<think>] THINK </think> WS answer     (the block may be open in the prompt)
//   qwen3, block open       : THINK </think> WS answer
//   qwen3, no block open    : WS <think> THINK </think> WS answer  |  answer   (thinking is optional)
//
// THINK is any text without "</think>" (so the parser splits exactly where the grammar does), WS up to 8 spaces,
// tabs or newlines.
#pragma once

#include "engine/grammar/expr.h"
#include "server/reasoning.h"

namespace mopt::server {

// `answer` with its start rule renamed and a new start rule `root` as above. kNone returns `answer` unchanged.
grammar::Grammar grammar_after_reasoning(ReasoningKind kind, bool prompt_in_thinking, grammar::Grammar answer);

}  // namespace mopt::server
