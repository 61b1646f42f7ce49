#include "server/reasoning.h"

#include <algorithm>

namespace mopt::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

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
  ReasoningDelta out;
  if (mode_ == Mode::kContent && buf_.empty()) {
    out.content = text;
    return out;
  }
  buf_ += text;
  while (step(out)) {
  }
  return out;
}

bool ReasoningParser::step(ReasoningDelta& out) {
  switch (mode_) {
    case Mode::kLeading: {  // an opening <think> (after whitespace) starts the reasoning
      size_t i = 0;
      while (i < buf_.size() && is_ws(buf_[i])) ++i;
      const std::string_view rest = std::string_view(buf_).substr(i);
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return false;  // undecided
      if (rest.substr(0, kOpen.size()) == kOpen) {
        buf_.erase(0, i + kOpen.size());
        mode_ = Mode::kReasoning;
      } else {
        mode_ = kind_ == ReasoningKind::kDeepSeekR1 ? Mode::kReasoning : Mode::kContent;
      }
      return true;
    }
    case Mode::kReasoning: {
      const size_t at = buf_.find(kClose);
      if (at == std::string::npos) {
        const size_t keep = partial_suffix(buf_, kClose);
        out.reasoning += buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return false;
      }
      out.reasoning += buf_.substr(0, at);
      buf_.erase(0, at + kClose.size());
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
