#include "server/tool_parser.h"

#include "server/marker_scan.h"
#include "server/tool_markers.h"

namespace mopt::server {
namespace {

constexpr size_t npos = std::string::npos;

bool all_ws(std::string_view s) { return ws_end(s) == s.size(); }

bool decode_string(std::string_view raw, std::string& out) {
  try {
    json v = json::parse(raw);
    if (!v.is_string()) return false;
    out = v.get<std::string>();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

using ObjectScan = ToolCallParser::ObjectScan;

// Scans a call object whose text starts at s[0] == '{', from where `r` stopped (s is the text of the last call
// plus what arrived since).
void scan_object(std::string_view s, std::string_view args_key, std::string_view alt_args_key, ObjectScan& r) {
  if (r.complete) return;
  int& depth = r.depth;
  bool &in_str = r.in_str, &esc = r.esc, &primitive = r.primitive;
  enum : uint8_t { kKey, kColon, kValue, kAfter };
  uint8_t& st = r.st;
  size_t &str_begin = r.str_begin, &val_begin = r.val_begin;
  std::string& key = r.key;
  // A repeated key keeps its first value (a stream has sent the first before a second can appear).
  auto is_args = [&] { return key == args_key || key == alt_args_key; };
  auto open_value = [&](size_t i, bool prim) {
    val_begin = i;
    primitive = prim;
    if (is_args() && r.args_begin == npos) {
      r.args_begin = i;
      r.args_end = npos;
      r.args_first = s[i];
    }
  };
  auto close_value = [&](size_t e) {
    if (key == "name") {
      if (!r.has_name && !r.bad_name) {
        r.has_name = decode_string(s.substr(val_begin, e - val_begin), r.name);
        r.bad_name = !r.has_name;
      }
    } else if (is_args() && r.args_begin == val_begin) {
      r.args_end = e;
    }
    val_begin = npos;
    primitive = false;
    st = kAfter;
  };
  for (size_t& i = r.pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
        if (depth == 1 && st == kKey) {
          if (!decode_string(s.substr(str_begin, i + 1 - str_begin), key)) key.clear();
          st = kColon;
        } else if (depth == 1 && st == kValue && val_begin == str_begin) {
          close_value(i + 1);
        }
      }
      continue;
    }
    if (primitive && depth == 1 && (c == ',' || c == '}' || is_ws(c))) close_value(i);
    switch (c) {
      case '"':
        in_str = true;
        str_begin = i;
        if (depth == 1 && st == kValue && val_begin == npos) open_value(i, false);
        break;
      case '{':
      case '[':
        if (depth == 1 && st == kValue && val_begin == npos) open_value(i, false);
        ++depth;
        break;
      case '}':
      case ']':
        --depth;
        if (depth == 1 && st == kValue && val_begin != npos) close_value(i + 1);
        if (depth == 0) {
          r.complete = true;
          r.end = i + 1;
          return;
        }
        break;
      case ':':
        if (depth == 1 && st == kColon) st = kValue;
        break;
      case ',':
        if (depth == 1) st = kKey;
        break;
      default:
        if (!is_ws(c) && depth == 1 && st == kValue && val_begin == npos) open_value(i, true);
    }
  }
}

}  // namespace

ToolCallParser::ToolCallParser(ToolParserKind kind)
    : kind_(kind), mode_(kind == ToolParserKind::kLlama3Json ? Mode::kLeading : Mode::kContent) {}

const char* ToolCallParser::start_marker() const { return tool_call_start_marker(kind_); }

void ToolCallParser::content(ParsedDelta& out, std::string_view text) {
  if (after_calls_) trailing_ += text;
  else out.content += text;
}

void ToolCallParser::start_call(ParsedDelta& out, const std::string& name) {
  ToolCallDelta d;
  d.index = n_calls_++;
  d.start = true;
  d.name = name;
  out.calls.push_back(std::move(d));
  started_ = true;
  args_sent_ = 0;
}

// The current block is not a tool call after all: what opened it (its marker) is content, and the text after that
// is scanned again as content, where a later block may start. (Not the whole rest as content: how much of it had
// arrived would then decide whether a later block is a call, and a stream would part from the whole text.)
void ToolCallParser::malformed(ParsedDelta& out) {
  content(out, block_);
  buf_ = obj_ + buf_;
  block_.clear();
  obj_.clear();
  scan_ = {};
  mode_ = Mode::kContent;
}

ParsedDelta ToolCallParser::feed(std::string_view text) {
  if (kind_ == ToolParserKind::kNone) return {.content = std::string(text), .calls = {}};
  return feed_steps<ParsedDelta>(buf_, text, [this](ParsedDelta& out) { return step(out); });
}

bool ToolCallParser::step(ParsedDelta& out) {
  switch (mode_) {
    case Mode::kLeading: {  // llama3: does the output open with a JSON object?
      const size_t i = ws_end(buf_);
      if (i == buf_.size()) return false;
      if (buf_[i] == '{') {
        block_ = buf_.substr(0, i);
        buf_.erase(0, i);
        mode_ = Mode::kObject;
      } else {
        mode_ = Mode::kContent;
      }
      return true;
    }
    case Mode::kContent: {
      const std::string_view marker = start_marker();
      const MarkerSplit m = split_at_marker(buf_, marker);
      content(out, std::string_view(buf_).substr(0, m.text));
      buf_.erase(0, m.text);
      if (!m.found) return false;
      block_ = std::string(marker);
      buf_.erase(0, marker.size());
      need_list_ = kind_ == ToolParserKind::kMistral;
      mode_ = kind_ == ToolParserKind::kDeepSeekV3 ? Mode::kDsExpect : Mode::kOpen;
      return true;
    }
    case Mode::kOpen: {  // after a marker or a separator: the next call object (mistral: the list first)
      const size_t i = ws_end(buf_);
      block_ += buf_.substr(0, i);
      buf_.erase(0, i);
      if (buf_.empty()) return false;
      if (need_list_) {  // mistral: [TOOL_CALLS] is followed by a JSON list of calls
        if (buf_[0] != '[') {
          malformed(out);
          return true;
        }
        need_list_ = false;
        block_ += '[';
        buf_.erase(0, 1);
        return true;
      }
      if (buf_[0] != '{') {
        malformed(out);
        return true;
      }
      mode_ = Mode::kObject;
      return true;
    }
    case Mode::kObject: return step_object(out);
    case Mode::kAfterObject: {
      const size_t i = ws_end(buf_);
      if (i == buf_.size()) return false;
      after_calls_ = true;
      if (kind_ == ToolParserKind::kHermes) {
        const std::string_view close = markers::kHermesClose;
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (prefix_of(rest, close) && rest.size() < close.size()) return false;
        if (rest.substr(0, close.size()) == close) buf_.erase(0, i + close.size());
        mode_ = Mode::kContent;
      } else if (kind_ == ToolParserKind::kLlama3Json && buf_[i] == ';') {
        buf_.erase(0, i + 1);
        block_.clear();
        mode_ = Mode::kOpen;
      } else if (kind_ == ToolParserKind::kMistral && buf_[i] == ',') {
        buf_.erase(0, i + 1);
        block_.clear();
        mode_ = Mode::kOpen;
      } else if (kind_ == ToolParserKind::kMistral && buf_[i] == ']') {
        buf_.erase(0, i + 1);
        mode_ = Mode::kContent;
      } else {
        mode_ = Mode::kContent;
      }
      return true;
    }
    default: return step_deepseek(out);
  }
}

bool ToolCallParser::step_object(ParsedDelta& out) {
  obj_ += buf_;
  buf_.clear();
  const bool llama = kind_ == ToolParserKind::kLlama3Json;
  scan_object(obj_, llama ? "parameters" : "arguments", llama ? "arguments" : "parameters", scan_);
  const ObjectScan& s = scan_;
  if (s.bad_name) {
    malformed(out);
    return true;
  }
  if (s.has_name && !started_) start_call(out, s.name);
  if (started_ && s.args_begin != npos && s.args_first != '"') {
    const size_t end = s.args_end != npos ? s.args_end : (s.complete ? s.end : obj_.size());
    if (end > s.args_begin + args_sent_) {
      const std::string piece = obj_.substr(s.args_begin + args_sent_, end - s.args_begin - args_sent_);
      out.calls.push_back({n_calls_ - 1, false, "", piece});
      args_sent_ += piece.size();
    }
  }
  if (!s.complete) return false;
  if (!s.has_name) {
    malformed(out);
    return true;
  }
  std::string rest = obj_.substr(s.end);
  if (s.args_begin == npos || s.args_first == '"') {
    std::string args = "{}";
    if (s.args_begin != npos && !decode_string(std::string_view(obj_).substr(s.args_begin, s.args_end - s.args_begin), args))
      args = obj_.substr(s.args_begin, s.args_end - s.args_begin);
    out.calls.push_back({n_calls_ - 1, false, "", args});
  }
  started_ = false;
  obj_.clear();
  scan_ = {};
  block_.clear();
  buf_ = std::move(rest);
  mode_ = Mode::kAfterObject;
  return true;
}

bool ToolCallParser::step_deepseek(ParsedDelta& out) {
  auto skip_ws = [&] {
    const size_t i = ws_end(buf_);
    block_ += buf_.substr(0, i);
    buf_.erase(0, i);
  };
  // Consumes `m` at the start of buf_: 1 done, 0 need more text, -1 something else is there.
  auto take = [&](std::string_view m) {
    if (buf_.compare(0, m.size(), m) == 0) {
      block_ += m;
      buf_.erase(0, m.size());
      return 1;
    }
    return prefix_of(buf_, m) ? 0 : -1;
  };
  switch (mode_) {
    case Mode::kDsExpect: {
      skip_ws();
      if (buf_.empty()) return false;
      const int call = take(markers::kDsCallBegin);
      if (call == 1) {
        mode_ = Mode::kDsType;
        return true;
      }
      const int end = take(markers::kDsCallsEnd);
      if (end == 1) {
        after_calls_ = true;
        block_.clear();
        mode_ = Mode::kContent;
        return true;
      }
      if (call == 0 || end == 0) return false;
      if (n_calls_ == 0) {
        malformed(out);
      } else {
        after_calls_ = true;
        mode_ = Mode::kContent;
      }
      return true;
    }
    case Mode::kDsType: {
      const size_t at = buf_.find(markers::kDsSep);
      if (at == npos) return false;
      block_ += buf_.substr(0, at) + markers::kDsSep;
      buf_.erase(0, at + std::string_view(markers::kDsSep).size());
      mode_ = Mode::kDsName;
      return true;
    }
    case Mode::kDsName: {
      const size_t at = buf_.find('\n');
      if (at == npos) return false;
      obj_ = buf_.substr(0, at);  // the name, for now
      block_ += buf_.substr(0, at + 1);
      buf_.erase(0, at + 1);
      mode_ = Mode::kDsFence;
      return true;
    }
    case Mode::kDsFence: {
      const int fence = take("```json\n");
      if (fence == 0) return false;
      ds_fenced_ = fence == 1;
      std::string name = obj_;
      while (!name.empty() && is_ws(name.back())) name.pop_back();
      obj_.clear();
      if (name.empty()) {
        malformed(out);
        return true;
      }
      block_.clear();
      start_call(out, name);
      mode_ = Mode::kDsArgs;
      return true;
    }
    case Mode::kDsArgs: {
      const std::string end = ds_fenced_ ? std::string("\n```") + markers::kDsCallEnd : markers::kDsCallEnd;
      const MarkerSplit m = split_at_marker(buf_, end);
      if (m.text > 0) out.calls.push_back({n_calls_ - 1, false, "", buf_.substr(0, m.text)});
      buf_.erase(0, m.text);
      if (!m.found) return false;
      buf_.erase(0, end.size());
      started_ = false;
      mode_ = Mode::kDsExpect;
      return true;
    }
    default: return false;
  }
}

ParsedDelta ToolCallParser::finish() {
  ParsedDelta out;
  if (kind_ == ToolParserKind::kNone) return out;
  // A block the end leaves unfinished and without a call is content (malformed), and the text after its marker is
  // scanned again: it may hold another block, which the end may leave unfinished in turn.
  for (bool again = true; again;) {
    again = false;
    switch (mode_) {
      case Mode::kLeading:
      case Mode::kContent: content(out, buf_); break;
      case Mode::kAfterObject:
      case Mode::kDsExpect:
        if (after_calls_ || kind_ != ToolParserKind::kDeepSeekV3 || n_calls_ > 0) {
          after_calls_ = true;
          content(out, buf_);
        } else {
          malformed(out);
          again = true;
        }
        break;
      case Mode::kDsArgs:
        if (!buf_.empty()) out.calls.push_back({n_calls_ - 1, false, "", buf_});
        break;
      default:  // truncated before its name: text; after it, the call stays (truncated)
        if (!started_) {
          malformed(out);
          again = true;
        }
    }
    if (again)
      while (step(out)) {
      }
  }
  buf_.clear();
  if (!trailing_.empty() && !all_ws(trailing_)) out.content += trailing_;
  trailing_.clear();
  return out;
}

}  // namespace mopt::server
