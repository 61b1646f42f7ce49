// Incremental HTTP/1.1 response parsing for the bench client (and request parsing for the fake server):
// header block, chunked transfer decoding and Server-Sent Events. Everything is fed arbitrary byte slices
// (as they come off a socket) and bounds-checked: hostile or broken servers give a Status, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mopt::loadgen {

constexpr size_t kMaxHeaderBytes = 64 * 1024;

struct HttpHead {
  int status = 0;                 // response: status code; request: 0
  std::string method, target;     // request only
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  const std::string* find(std::string_view lower_name) const;
  bool chunked = false;           // Transfer-Encoding: chunked
  int64_t content_length = -1;    // -1: absent
  bool keep_alive = true;         // HTTP/1.1 default unless "Connection: close"
};

// Looks for a complete header block at the start of `buf`. Returns the number of bytes it used (0: need more
// data) or an error (malformed, or no end of headers within kMaxHeaderBytes).
Result<size_t> parse_http_head(std::string_view buf, bool is_request, HttpHead* out);

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
