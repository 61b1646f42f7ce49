// One chat choice's output as the API returns it: the generated text goes through the reasoning parser (when the
// server has one) and the tool-call parser (when the request's tool_choice is not none), and comes out as
// streaming deltas ({"reasoning_content"}, {"content"}, {"tool_calls": [...]}) or as the final message. Tool calls
// get ids here ("call_" + 24 hex digits) and stream as OpenAI streams them: the first delta of a call has its
// index, id, type and name with empty arguments, the next ones pieces of its arguments.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai.h"
#include "server/reasoning.h"
#include "server/tool_parser.h"

namespace mopt::server {

class ChatOutput {
 public:
  ChatOutput(ReasoningKind reasoning, bool prompt_in_thinking, ToolParserKind tools);

  // Streaming: the delta for the next piece of text (an empty object when nothing is ready to send); `last`: the
  // output ends with it (whatever the parsers held back is released).
  json delta(std::string_view text, bool last);
  // Non-streaming: the whole text, then the message {"role", "content", ["reasoning_content"], ["tool_calls"]}.
  json message(std::string_view text);
  bool has_tool_calls() const { return !calls_.empty(); }

 private:
  void take(const ReasoningDelta& r, json& d);
  void take(const ParsedDelta& p, json& d);

  bool reasoning_on_;
  ReasoningParser reasoning_;
  ToolCallParser tools_;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls_;
  std::string content_, reasoning_text_;
};

// A fresh tool-call id: "call_" and 24 random hex digits.
std::string new_tool_call_id();

}  // namespace mopt::server
