// One chat choice's output through both parsers (chat_output.h): a thinking model's reply with a think block, some
// content and tool calls comes out as reasoning_content, content and tool_calls; streamed in random pieces, the
// deltas assembled as OpenAI clients assemble them give the same message, and the calls' ids agree.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "server/chat_output.h"

namespace mopt::server {
namespace {

// Assembles streamed deltas into a message the way the openai client does.
json assemble(const std::vector<json>& deltas) {
  std::string content, reasoning;
  json calls = json::array();
  for (const json& d : deltas) {
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    for (const json& t : d.value("tool_calls", json::array())) {
      const size_t i = t["index"].get<size_t>();
      if (t.contains("id")) {
        EXPECT_EQ(i, calls.size());
        calls.push_back({{"id", t["id"]}, {"type", t["type"]},
                         {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
      }
      std::string& args = calls[i]["function"]["arguments"].get_ref<std::string&>();
      args += t["function"]["arguments"].get<std::string>();
    }
  }
  json m = {{"role", "assistant"}, {"content", content.empty() && !calls.empty() ? json(nullptr) : json(content)},
            {"reasoning_content", reasoning.empty() ? json(nullptr) : json(reasoning)}};
  if (!calls.empty()) m["tool_calls"] = calls;
  return m;
}

TEST(ChatOutput, ReasoningContentAndToolCallsStreamedOrWhole) {
  const std::string text =
      "<think>\nThe user wants the weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Oslo\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_time\", \"arguments\": {}}\n</tool_call>";
  ChatOutput whole(ReasoningKind::kQwen3, false, ToolParserKind::kHermes);
  const json m = whole.message(text);
  EXPECT_EQ(m["reasoning_content"], "\nThe user wants the weather.\n");
  EXPECT_EQ(m["content"], "\n\nLet me look.\n");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Oslo", "unit": "celsius"})"));
  EXPECT_EQ(m["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_TRUE(whole.has_tool_calls());
  Xoshiro256 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    ChatOutput s(ReasoningKind::kQwen3, false, ToolParserKind::kHermes);
    std::vector<json> deltas;
    for (size_t at = 0; at < text.size();) {
      const size_t n = 1 + rng.next() % 9;
      deltas.push_back(s.delta(text.substr(at, n), at + n >= text.size()));
      at += n;
    }
    json got = assemble(deltas);
    for (json& c : got["tool_calls"]) {
      EXPECT_TRUE(c["id"].get<std::string>().rfind("call_", 0) == 0);
      c.erase("id");
    }
    json want = m;
    for (json& c : want["tool_calls"]) c.erase("id");
    EXPECT_EQ(got, want) << "trial " << trial;
  }
  // reasoning only (the block never closed): content null, as for a reply of tool calls only
  ChatOutput open(ReasoningKind::kDeepSeekR1, true, ToolParserKind::kNone);
  const json r = open.message("still thinking");
  EXPECT_EQ(r["reasoning_content"], "still thinking");
  EXPECT_TRUE(r["content"].is_null());
}

}  // namespace
}  // namespace mopt::server
