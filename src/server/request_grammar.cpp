#include "server/request_grammar.h"

#include "engine/grammar/gbnf.h"
#include "server/reasoning_grammar.h"
#include "server/server.h"

namespace mopt::server {

std::variant<RequestGrammar, ApiError> request_grammar(GenerateRequest& g, const ServedModel& m,
                                                       ReasoningKind reasoning, bool prompt_in_thinking) {
  RequestGrammar out;
  const bool tools_on = g.chat && g.tool_choice != ToolChoice::kNone;
  if (tools_on && m.tool_parser == ToolParserKind::kNone)
    return bad_request("'tools' with tool_choice \"" + std::string(g.tool_choice == ToolChoice::kAuto ? "auto" :
                       g.tool_choice == ToolChoice::kRequired ? "required" : "named") +
                       "\" needs a tool-call format, and this server's chat template prints none it knows; start the "
                       "server with --tool-call-parser (hermes, llama3_json, mistral or deepseek_v3), or send "
                       "tool_choice \"none\"", "tool_choice");
  if (tools_on) out.tool_parser = m.tool_parser;
  std::string gbnf = g.constraint_gbnf, param = g.constraint_param;
  const bool forced = tools_on && (g.tool_choice == ToolChoice::kRequired || g.tool_choice == ToolChoice::kNamed);
  bool strict = false;
  for (const ToolSpec& t : g.tool_specs) strict = strict || t.strict;
  const bool strict_auto = tools_on && g.tool_choice == ToolChoice::kAuto && strict;
  if (strict_auto && !gbnf.empty())
    return bad_request("'tools' with \"strict\": true under tool_choice auto are enforced by a grammar, which cannot "
                       "be combined with '" + param + "'; send strict false, or tool_choice required", "tools");
  if (forced || strict_auto) {
    auto calls = tool_calls_gbnf(out.tool_parser, g.tool_specs, g.tool_choice_name, g.parallel_tool_calls, !forced);
    if (auto* e = std::get_if<ApiError>(&calls)) return *e;
    gbnf = std::get<std::string>(calls);
    param = "tools";
  }
  const bool reasoning_on = g.chat && reasoning != ReasoningKind::kNone;
  if ((tools_on && m.tool_markers_special) || (reasoning_on && m.think_markers_special))
    g.params.skip_special_tokens = false;  // the parsers read the markers
  if (gbnf.empty()) return out;
  if (reasoning_on) {
    auto parsed = grammar::parse_gbnf(gbnf);
    if (!parsed) return bad_request("'" + param + "': " + parsed.message(), param, "invalid_grammar");
    gbnf = grammar::print_gbnf(grammar_after_reasoning(reasoning, prompt_in_thinking, std::move(*parsed)));
  }
  auto cg = m.grammars->get(gbnf, g.params.skip_special_tokens);
  if (!cg) return bad_request("'" + param + "': " + cg.message(), param, "invalid_grammar");
  out.compiled = *cg;
  return out;
}

}  // namespace mopt::server
