// Tool-call grammars (tool_calls_gbnf): under tool_choice auto with a strict tool, each family's grammar accepts
// free text, the family's calls after it, and only calls whose strict arguments follow the schema; whatever it
// accepts, the family's parser reads back as the same content and calls. Checked with the byte vocabulary.
#include <gtest/gtest.h>

#include "server/tool_markers.h"
#include "server/tool_parser.h"
#include "unit/engine/grammar/grammar_util.h"

namespace mopt::server {
namespace {

using grammar::testing::classify;
using grammar::testing::compile_or_die;

std::vector<ToolSpec> tools() {
  ToolSpec weather{"get_weather", json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
      "maxLength": 12}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false})"),
                   true};
  ToolSpec time{"get_time", json::parse(R"({"type": "object", "properties": {}})"), false};
  return {weather, time};
}

// One call in the family's format.
std::string call(ToolParserKind k, const std::string& name, const std::string& args) {
  using namespace markers;
  switch (k) {
    case ToolParserKind::kHermes:
      return std::string(kHermesOpen) + "\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n" + kHermesClose;
    case ToolParserKind::kLlama3Json: return "{\"name\": \"" + name + "\", \"parameters\": " + args + "}";
    case ToolParserKind::kMistral: return std::string(kMistralCalls) + "[{\"name\": \"" + name + "\", \"arguments\": " +
                                          args + "}]";
    case ToolParserKind::kDeepSeekV3:
      return std::string(kDsCallsBegin) + kDsCallBegin + "function" + kDsSep + name + "\n```json\n" + args + "\n```" +
             kDsCallEnd + kDsCallsEnd;
    case ToolParserKind::kNone: break;
  }
  return "";
}

struct Read {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;
};

Read read(ToolParserKind k, const std::string& text) {
  ToolCallParser p(k);
  Read r;
  std::vector<std::string> args;
  for (const ParsedDelta& d : {p.feed(text), p.finish()}) {
    r.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.start) {
        r.calls.push_back({c.name, json()});
        args.emplace_back();
      }
      args[static_cast<size_t>(c.index)] += c.arguments;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) r.calls[i].second = json::parse(args[i]);
  return r;
}

TEST(ToolGrammar, AutoWithAStrictToolInEachFamily) {
  const std::string weather = R"({"city": "Oslo", "unit": "c"})";
  for (ToolParserKind k : {ToolParserKind::kHermes, ToolParserKind::kLlama3Json, ToolParserKind::kMistral,
                           ToolParserKind::kDeepSeekV3}) {
    SCOPED_TRACE(tool_parser_name(k));
    auto gbnf = tool_calls_gbnf(k, tools(), "", /*parallel=*/false, /*optional=*/true);
    ASSERT_TRUE(std::holds_alternative<std::string>(gbnf));
    auto g = compile_or_die(std::get<std::string>(gbnf));
    ASSERT_TRUE(g);
    const bool llama = k == ToolParserKind::kLlama3Json;
    const std::string lead = llama ? std::string("Let me see. ") + markers::kPythonTag : "Let me see. ";
    // accepted, and read back as the same content and calls
    struct Ok {
      std::string text, content;
      std::vector<std::pair<std::string, json>> calls;
    };
    const Ok oks[] = {
        {"It is sunny in Oslo.", "It is sunny in Oslo.", {}},
        {"", "", {}},
        {lead + call(k, "get_weather", weather), "Let me see. ", {{"get_weather", json::parse(weather)}}},
        {call(k, "get_weather", weather), "", {{"get_weather", json::parse(weather)}}},
        {call(k, "get_time", R"({"any": [1, {"thing": null}]})"), "",  // not strict: any object
         {{"get_time", json::parse(R"({"any": [1, {"thing": null}]})")}}},
    };
    for (const Ok& c : oks) {
      EXPECT_EQ(classify(*g, c.text), 1) << c.text;
      Read r = read(k, c.text);
      EXPECT_EQ(r.content, c.content) << c.text;
      EXPECT_EQ(r.calls, c.calls) << c.text;
    }
    // refused: a strict call off its schema, an unknown function, a second call, the marker with no call after it
    for (const std::string& bad : {call(k, "get_weather", R"({"city": "Oslo", "unit": "kelvin"})"),
                                   call(k, "get_weather", R"({"city": "Oslo"})"), call(k, "get_date", "{}"),
                                   call(k, "get_time", "{}") + (llama ? ";" : "\n") + call(k, "get_time", "{}"),
                                   "Sure. " + std::string(tool_call_start_marker(k)) + " no call"})
      EXPECT_EQ(classify(*g, bad), -1) << bad;
    if (llama) {  // text must not open with '{' (the parser would read a call there)
      EXPECT_EQ(classify(*g, R"({"a": 1})"), -1);
      EXPECT_EQ(classify(*g, "\n " + call(k, "get_weather", weather)), 1);
    }
  }
}

TEST(ToolGrammar, StrictToolWithAnUnsupportedSchemaIsRefused) {
  std::vector<ToolSpec> t = tools();
  t[0].parameters = json::parse(R"({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})");
  auto gbnf = tool_calls_gbnf(ToolParserKind::kHermes, t, "", true, true);
  ASSERT_TRUE(std::holds_alternative<ApiError>(gbnf));
  const ApiError& e = std::get<ApiError>(gbnf);
  EXPECT_EQ(e.param, "tools[0].function.parameters");
  EXPECT_NE(e.message.find("'not'"), std::string::npos) << e.message;
  // not strict under auto: its schema is not compiled, so nothing to refuse
  t[0].strict = false;
  t[1].strict = true;
  EXPECT_TRUE(std::holds_alternative<std::string>(tool_calls_gbnf(ToolParserKind::kHermes, t, "", true, true)));
}

}  // namespace
}  // namespace mopt::server
