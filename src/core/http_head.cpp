#include "core/http_head.h"

#include <algorithm>
#include <cstring>

#include "core/strfmt.h"
#include "core/strings.h"

namespace mopt::http {
namespace {

// RFC 9110 token characters (methods, header names).
bool is_tchar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

HeadParse fail(int status, std::string message) {
  HeadParse p;
  p.error_status = status;
  p.error = std::move(message);
  return p;
}

std::string shown(std::string_view s, size_t max) { return std::string(s.substr(0, std::min(s.size(), max))); }

// "METHOD SP target SP HTTP/1.x"
HeadParse parse_request_line(std::string_view line, Head* out) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed HTTP request line");
  out->method = std::string(line.substr(0, sp1));
  out->target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  out->version = std::string(line.substr(sp2 + 1));
  if (!is_token(out->method) || out->target.empty() || (out->target[0] != '/' && out->target != "*"))
    return fail(400, "malformed HTTP request line");
  return HeadParse{};
}

// "HTTP/1.x SP 3DIGIT [SP reason]"
HeadParse parse_status_line(std::string_view line, Head* out) {
  const size_t sp = line.find(' ');
  const std::string_view code = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1, 3);
  const bool digits = code.size() == 3 && std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || (line.size() > sp + 4 && line[sp + 4] != ' ') || code[0] < '1' || code[0] > '5')
    return fail(400, strfmt("malformed HTTP status line '%s'", shown(line, 80).c_str()));
  out->version = std::string(line.substr(0, sp));
  out->status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  return HeadParse{};
}

// Content-Length: decimal digits only (no sign, no blanks), at most 18 of them (fits int64_t).
bool parse_length(std::string_view v, int64_t* n) {
  if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  int64_t x = 0;
  for (char c : v) x = x * 10 + (c - '0');
  *n = x;
  return true;
}

}  // namespace

const std::string* Head::find(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

bool lists_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = std::min(value.find(','), value.size());
    if (lower(trim_blanks(value.substr(0, comma))) == token) return true;
    value.remove_prefix(std::min(comma + 1, value.size()));
  }
  return false;
}

HeadParse parse_head(std::string_view buf, HeadKind kind, const HeadLimits& limits, Head* out) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos ? buf.size() > limits.max_bytes : end + 4 > limits.max_bytes)
    return fail(431, strfmt("the HTTP head (start line and headers) exceeds %zu bytes", limits.max_bytes));
  if (end == std::string_view::npos) return HeadParse{};
  *out = Head{};
  const std::string_view head = buf.substr(0, end);
  const size_t eol = std::min(head.find("\r\n"), head.size());
  HeadParse p = kind == HeadKind::kRequest ? parse_request_line(head.substr(0, eol), out)
                                           : parse_status_line(head.substr(0, eol), out);
  if (!p.ok()) return p;
  if (out->version != "HTTP/1.1" && out->version != "HTTP/1.0")
    return fail(505, strfmt("unsupported HTTP version '%s': only HTTP/1.0 and HTTP/1.1 are supported",
                            shown(out->version, 40).c_str()));

  for (size_t pos = eol + 2; pos < head.size();) {
    const size_t e = std::min(head.find("\r\n", pos), head.size());
    const std::string_view line = head.substr(pos, e - pos);
    pos = e + 2;
    const size_t colon = line.find(':');
    // A name that is not a token also rejects obsolete line folding (a line starting with a blank).
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return fail(400, strfmt("malformed HTTP header line '%s'", shown(line, 80).c_str()));
    const std::string_view value = trim_blanks(line.substr(colon + 1));
    if (value.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos)
      return fail(400, "malformed HTTP header line: the value holds a NUL, CR or LF byte");
    if (out->headers.size() == limits.max_fields)
      return fail(431, strfmt("more than %zu HTTP header lines", limits.max_fields));
    out->headers.emplace_back(lower(line.substr(0, colon)), std::string(value));
  }

  bool close = false, keep_alive = false;
  for (const auto& [name, value] : out->headers) {
    if (name == "content-length") {
      int64_t n = -1;
      if (!parse_length(value, &n))
        return fail(400, strfmt("invalid Content-Length header '%s' (decimal digits expected)", shown(value, 40).c_str()));
      if (out->content_length >= 0 && out->content_length != n)
        return fail(400, "invalid Content-Length header: two Content-Length headers disagree");
      out->content_length = n;
    } else if (name == "transfer-encoding") {
      out->chunked = out->chunked || lists_token(value, "chunked");
    } else if (name == "connection") {
      close = close || lists_token(value, "close");
      keep_alive = keep_alive || lists_token(value, "keep-alive");
    }
  }
  if (out->chunked) out->content_length = -1;  // RFC 9112 6.3: chunked framing wins over Content-Length
  out->keep_alive = !close && (out->version == "HTTP/1.1" || keep_alive);
  p.used = end + 4;
  return p;
}

}  // namespace mopt::http
