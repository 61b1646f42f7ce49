// Reasoning parser (--reasoning-parser deepseek_r1 | qwen3): splits a thinking model's output into the reasoning
// (between <think> and </think>, reported as `reasoning_content`) and the answer (`content`), also when it is fed
// in streamed pieces that cut the tags anywhere.
//
//   deepseek_r1: the output is reasoning until </think> (a leading <think> is dropped): R1's template opens the
//                block in the prompt, so the output may start inside it. No </think> at all: all reasoning.
//   qwen3      : the output is reasoning only when it opens with <think> (after whitespace), or when the prompt
//                left a <think> block open (the template's thinking prefix); otherwise all of it is content.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mopt::server {

enum class ReasoningKind { kNone, kDeepSeekR1, kQwen3 };

const char* reasoning_parser_name(ReasoningKind k);
std::optional<ReasoningKind> reasoning_parser_from_name(std::string_view name);  // "deepseek_r1", "qwen3"
// True when `prompt` ends inside a <think> block (its last <think> is not closed).
bool prompt_opens_thinking(std::string_view prompt);

struct ReasoningDelta {
  std::string reasoning, content;
};

class ReasoningParser {
 public:
  ReasoningParser(ReasoningKind kind, bool prompt_in_thinking);
  ReasoningDelta feed(std::string_view text);
  ReasoningDelta finish();

 private:
  enum class Mode { kLeading, kReasoning, kContent };
  bool step(ReasoningDelta& out);
  ReasoningKind kind_;
  Mode mode_;
  std::string buf_;
};

}  // namespace mopt::server
