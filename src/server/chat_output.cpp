#include "server/chat_output.h"

#include <random>

#include "core/rng.h"
#include "core/strfmt.h"

namespace mopt::server {

std::string new_tool_call_id() {
  thread_local Xoshiro256 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return strfmt("call_%016llx%08llx", static_cast<unsigned long long>(rng.next()),
                static_cast<unsigned long long>(rng.next() >> 32));
}

ChatOutput::ChatOutput(ReasoningKind reasoning, bool prompt_in_thinking, ToolParserKind tools)
    : reasoning_on_(reasoning != ReasoningKind::kNone), reasoning_(reasoning, prompt_in_thinking), tools_(tools) {}

void ChatOutput::take(const ParsedDelta& p, json& d) {
  if (!p.content.empty()) {
    content_ += p.content;
    d["content"] = d.value("content", std::string()) + p.content;
  }
  for (const ToolCallDelta& c : p.calls) {
    if (c.start) calls_.push_back({new_tool_call_id(), c.name, ""});
    Call& call = calls_[static_cast<size_t>(c.index)];
    call.arguments += c.arguments;
    if (!d.contains("tool_calls")) d["tool_calls"] = json::array();
    json& list = d["tool_calls"];
    if (c.start) {
      list.push_back({{"index", c.index},
                      {"id", call.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    } else if (!list.empty() && list.back()["index"] == c.index) {  // merge pieces of one call
      list.back()["function"]["arguments"] = list.back()["function"]["arguments"].get<std::string>() + c.arguments;
    } else {
      list.push_back({{"index", c.index}, {"function", {{"arguments", c.arguments}}}});
    }
  }
}

void ChatOutput::take(const ReasoningDelta& r, json& d) {
  if (!r.reasoning.empty()) {
    reasoning_text_ += r.reasoning;
    d["reasoning_content"] = d.value("reasoning_content", std::string()) + r.reasoning;
  }
  if (!r.content.empty()) take(tools_.feed(r.content), d);
}

json ChatOutput::delta(std::string_view text, bool last) {
  json d = json::object();
  if (!text.empty()) take(reasoning_.feed(text), d);
  if (last) {
    take(reasoning_.finish(), d);
    take(tools_.finish(), d);
  }
  return d;
}

json ChatOutput::message(std::string_view text) {
  delta(text, true);
  json m = {{"role", "assistant"}};
  // null when the output was all tool calls or all reasoning (as OpenAI and vLLM report it)
  m["content"] = content_.empty() && (!calls_.empty() || !reasoning_text_.empty()) ? json(nullptr) : json(content_);
  if (reasoning_on_) m["reasoning_content"] = reasoning_text_.empty() ? json(nullptr) : json(reasoning_text_);
  if (!calls_.empty()) {
    json list = json::array();
    for (const Call& c : calls_)
      list.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(list);
  }
  return m;
}

}  // namespace mopt::server
