// Incremental HTTP/1.1 response body parsing for the load generator's client: chunked transfer decoding and
// Server-Sent Events. Both are fed arbitrary byte slices (as they come off a socket) and bounds-checked: hostile
// or broken servers give a Status, never a crash.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mopt::loadgen {

// The head of a response (or, in the fake server, of a request) is parsed by core/http_head.h.

// Transfer-Encoding: chunked decoder.
class ChunkedDecoder {
 public:
  // Appends decoded payload to *out; returns an error on a malformed stream. After the terminating zero-size
  // chunk (and its trailer) done() is true and further bytes are an error.
  Status feed(std::string_view in, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kSizeExt, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kDone };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  int size_digits_ = 0;
  static constexpr size_t kMaxTrailerBytes = 64 * 1024;
  size_t trailer_line_len_ = 0;
  size_t trailer_bytes_ = 0;
};

// Server-Sent Events parser (the subset of the WHATWG spec that OpenAI-style streams use): lines ending in
// \n, \r\n or \r; "data:" lines are joined with \n; a blank line dispatches the event; ":" comments and other
// fields are ignored. Events larger than max_event_bytes are an error.
class SseParser {
 public:
  SseParser() = default;
  explicit SseParser(size_t max_event_bytes) : max_event_(max_event_bytes) {}
  // Calls on_event(data) for each complete event that has data. on_event returns false to stop (feed then
  // returns ok and ignores the rest).
  Status feed(std::string_view in, const std::function<bool(std::string_view)>& on_event);

 private:
  Status line(std::string_view l, const std::function<bool(std::string_view)>& on_event, bool* stop);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_cr_ = false;
  size_t max_event_ = 4u << 20;
};

}  // namespace mopt::loadgen
