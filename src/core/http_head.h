// HTTP/1.x message heads (RFC 9112): the request line or status line and the header fields, up to the blank line.
// One parser for the server (requests) and the load generator (responses; requests in its fake server). Input is
// untrusted: every field is checked and bounded, a bad head is an error value that says what was wrong and which
// status a server answers it with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mopt::http {

enum class HeadKind { kRequest, kResponse };

struct HeadLimits {
  size_t max_bytes = 64 * 1024;  // start line + header fields + the blank line
  size_t max_fields = 100;       // header field lines
};

struct Head {
  std::string method;   // request: "GET", "POST", ...
  std::string target;   // request: as sent, "/v1/completions?x=1" (starts with '/', or is "*")
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  int status = 0;       // response: 100..599
  std::vector<std::pair<std::string, std::string>> headers;  // in order; names lower-cased, values trimmed
  int64_t content_length = -1;  // Content-Length; -1 when absent or when the body is chunked (RFC 9112 6.3)
  bool chunked = false;         // Transfer-Encoding lists chunked
  bool keep_alive = true;       // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "Connection: keep-alive"

  // The value of the first header named `lower_name` (lower-case), or nullptr.
  const std::string* find(std::string_view lower_name) const;
};

struct HeadParse {
  size_t used = 0;        // bytes of the head including the blank line; 0 while the head is incomplete
  int error_status = 0;   // 0: no error; else the status a server answers with: 400 malformed, 431 too large, 505
  std::string error;      // what was wrong, for the error body or the client's report

  bool ok() const { return error_status == 0; }
  bool complete() const { return ok() && used > 0; }
};

// Parses the head at the start of `buf` into *out (overwritten). Incomplete (more bytes needed): used == 0 and no
// error, unless `buf` already holds more than limits.max_bytes without an end of head (431).
HeadParse parse_head(std::string_view buf, HeadKind kind, const HeadLimits& limits, Head* out);

// The reason phrase of a status code ("Not Found"); "Unknown" for codes this program never sends.
const char* reason_phrase(int status);

// Whether a comma-separated header value lists `token` (case-insensitive; `token` in lower case).
bool lists_token(std::string_view value, std::string_view token);

}  // namespace mopt::http
