#include "server/reasoning.h"

#include "server/marker_scan.h"

namespace mopt::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

const char* reasoning_parser_name(ReasoningKind k) {
  switch (k) {
    case ReasoningKind::kNone: return "none";
    case ReasoningKind::kDeepSeekR1: return "deepseek_r1";
    case ReasoningKind::kQwen3: return "qwen3";
  }
  return "none";
}

std::optional<ReasoningKind> reasoning_parser_from_name(std::string_view name) {
  if (name == "deepseek_r1") return ReasoningKind::kDeepSeekR1;
  if (name == "qwen3") return ReasoningKind::kQwen3;
  return std::nullopt;
}

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string_view::npos || close < open;
}

ReasoningParser::ReasoningParser(ReasoningKind kind, bool prompt_in_thinking)
    : kind_(kind), mode_(kind == ReasoningKind::kNone ? Mode::kContent : Mode::kLeading) {
  if (kind != ReasoningKind::kNone && prompt_in_thinking) mode_ = Mode::kReasoning;
}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  if (mode_ == Mode::kContent && buf_.empty()) return {.content = std::string(text)};
  return feed_steps<ReasoningDelta>(buf_, text, [this](ReasoningDelta& out) { return step(out); });
}

bool ReasoningParser::step(ReasoningDelta& out) {
  switch (mode_) {
    case Mode::kLeading: {  // an opening <think> (after whitespace) starts the reasoning
      const size_t i = ws_end(buf_);
      const std::string_view rest = std::string_view(buf_).substr(i);
      if (rest.size() < kOpen.size() && prefix_of(rest, kOpen)) return false;  // undecided
      if (rest.substr(0, kOpen.size()) == kOpen) {
        buf_.erase(0, i + kOpen.size());
        mode_ = Mode::kReasoning;
      } else {
        mode_ = kind_ == ReasoningKind::kDeepSeekR1 ? Mode::kReasoning : Mode::kContent;
      }
      return true;
    }
    case Mode::kReasoning: {
      const MarkerSplit m = split_at_marker(buf_, kClose);
      out.reasoning.append(buf_, 0, m.text);
      buf_.erase(0, m.text);
      if (!m.found) return false;
      buf_.erase(0, kClose.size());
      mode_ = Mode::kContent;
      return true;
    }
    case Mode::kContent:
      out.content += buf_;
      buf_.clear();
      return false;
  }
  return false;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  if (mode_ == Mode::kLeading) mode_ = kind_ == ReasoningKind::kDeepSeekR1 ? Mode::kReasoning : Mode::kContent;
  if (mode_ == Mode::kReasoning) out.reasoning = std::move(buf_);
  else out.content = std::move(buf_);
  buf_.clear();
  return out;
}

}  // namespace mopt::server
