// What the streaming parsers of generated text (reasoning.cpp: <think> blocks, tool_parser.cpp: tool-call markers)
// share. Text arrives in pieces that may cut a marker anywhere, so each parser holds the undecided text in a buffer
// and consumes it step by step; a tail that may still become a marker is held back until the next piece.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace mopt::server {

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The index of the first character of `s` that is not whitespace (s.size() when there is none).
inline size_t ws_end(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// `s` is a (possibly complete) prefix of `marker`.
inline bool prefix_of(std::string_view s, std::string_view marker) {
  return s.size() <= marker.size() && marker.substr(0, s.size()) == s;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker` (text that may still become it).
inline size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// Held text `s` split at the first `marker`: s[0, text) is decided (not part of a marker); `found`: the marker
// starts at `text`. Without a marker, `text` leaves out the tail that may still become one.
struct MarkerSplit {
  size_t text = 0;
  bool found = false;
};
inline MarkerSplit split_at_marker(std::string_view s, std::string_view marker) {
  const size_t at = s.find(marker);
  if (at != std::string_view::npos) return {at, true};
  return {s.size() - partial_suffix(s, marker), false};
}

// One feed() of a streaming parser: `text` joins the held text `buf`, then step(out) runs for as long as it
// consumes something (it returns false when it needs more text).
template <class Delta, class Step>
Delta feed_steps(std::string& buf, std::string_view text, Step&& step) {
  Delta out;
  buf += text;
  while (step(out)) {
  }
  return out;
}

}  // namespace mopt::server
