// The grammar of one generate request, from what the body asks for: a constraint (response_format, guided_*,
// grammar, ...) or, for tool_choice required / named, the forced tool calls in the template family's format; with a
// reasoning parser, wrapped so that it applies after the think block (reasoning_grammar.h). Compiled through the
// model's GrammarCache. Also decides how the chat output is parsed (the tool-call format, or none) and whether the
// request must render special tokens (when the markers its parsers read are control tokens).
#pragma once

#include <memory>
#include <variant>

#include "engine/grammar/matcher.h"
#include "server/openai.h"
#include "server/reasoning.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace mopt::server {

struct ServedModel;

struct RequestGrammar {
  std::shared_ptr<grammar::CompiledGrammar> compiled;  // null: unconstrained
  ToolParserKind tool_parser = ToolParserKind::kNone;  // how the chat output is parsed for tool calls
};

// g.params.skip_special_tokens may be turned off (see above). prompt_in_thinking: the chat prompt leaves a think
// block open (reasoning.h).
std::variant<RequestGrammar, ApiError> request_grammar(GenerateRequest& g, const ServedModel& m,
                                                       ReasoningKind reasoning, bool prompt_in_thinking);

}  // namespace mopt::server
