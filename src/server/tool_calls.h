// Tool calls: validation of `tools` / `tool_choice` / `parallel_tool_calls`, the tool-call format of each chat
// template family (vLLM's parser names: hermes for Qwen2.5/Qwen3, llama3_json, mistral, deepseek_v3), and the
// grammar that forces a call in that format when tool_choice is required or names a function. The streaming parser
// that turns a model's output back into tool calls is tool_parser.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/openai.h"

namespace mopt::server {

enum class ToolParserKind { kNone, kHermes, kLlama3Json, kMistral, kDeepSeekV3 };

const char* tool_parser_name(ToolParserKind k);
// vLLM's spellings: hermes, llama3_json, mistral, deepseek_v3.
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
// The family whose markers the chat template prints (kNone when it prints none of them).
ToolParserKind detect_tool_parser(std::string_view chat_template);
// Text markers of the format; where the vocabulary has them as control tokens, the request renders special
// tokens so the parser sees them.
std::vector<std::string> tool_parser_markers(ToolParserKind k);
// The text that starts the family's tool calls in an output (the parser's and the optional grammar's split point).
const char* tool_call_start_marker(ToolParserKind k);

// Reads tools, tool_choice and parallel_tool_calls of a chat body into r (tools, tool_specs, tool_choice, ...).
std::optional<ApiError> parse_tools(const json& body, GenerateRequest& r);

// A GBNF grammar for tool calls in the family's format, their arguments following each tool's parameters schema
// (an unsupported schema keyword is a 400 naming the tool):
//   forced (optional false): calls of the function `only` (tool_choice named) or of any of `tools` (required); one
//                            call, or several when `parallel`
//   optional (tool_choice auto with a strict tool): free text, then optionally calls as above, the text never
//                            containing the marker that starts calls; only strict tools' arguments follow a schema
std::variant<std::string, ApiError> tool_calls_gbnf(ToolParserKind k, const std::vector<ToolSpec>& tools,
                                                    const std::string& only, bool parallel, bool optional);

}  // namespace mopt::server
