#include "loadgen/http_parse.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace mopt::loadgen {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
bool contains_token(std::string_view list, std::string_view token) {
  // Comma-separated, case-insensitive.
  const std::string l = lower(list);
  size_t start = 0;
  while (start <= l.size()) {
    size_t comma = l.find(',', start);
    if (comma == std::string::npos) comma = l.size();
    if (trim(std::string_view(l).substr(start, comma - start)) == token) return true;
    start = comma + 1;
  }
  return false;
}

}  // namespace

const std::string* HttpHead::find(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

Result<size_t> parse_http_head(std::string_view buf, bool is_request, HttpHead* out) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (buf.size() > kMaxHeaderBytes)
      return error("HTTP header block exceeds %zu bytes without an end (\\r\\n\\r\\n)", kMaxHeaderBytes);
    return size_t{0};
  }
  if (end > kMaxHeaderBytes) return error("HTTP header block of %zu bytes exceeds the %zu byte limit", end, kMaxHeaderBytes);
  *out = HttpHead{};
  std::string_view head = buf.substr(0, end);
  size_t eol = head.find("\r\n");
  std::string_view first = head.substr(0, eol);
  std::string_view version;
  if (is_request) {
    // METHOD SP target SP HTTP/1.x
    const size_t s1 = first.find(' '), s2 = first.rfind(' ');
    if (s1 == std::string_view::npos || s2 == s1) return error("malformed HTTP request line");
    out->method = std::string(first.substr(0, s1));
    out->target = std::string(first.substr(s1 + 1, s2 - s1 - 1));
    version = first.substr(s2 + 1);
  } else {
    // HTTP/1.x SP 3DIGIT SP reason
    const size_t s1 = first.find(' ');
    if (s1 == std::string_view::npos || first.size() < s1 + 4) return error("malformed HTTP status line");
    version = first.substr(0, s1);
    std::string_view code = first.substr(s1 + 1, 3);
    int status = 0;
    auto [p, ec] = std::from_chars(code.data(), code.data() + 3, status);
    if (ec != std::errc() || p != code.data() + 3 || status < 100 || status > 599)
      return error("malformed HTTP status code in '%.*s'", static_cast<int>(std::min<size_t>(first.size(), 80)),
                   first.data());
    out->status = status;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return error("unsupported HTTP version '%.*s' (HTTP/1.0 or 1.1 expected)",
                 static_cast<int>(std::min<size_t>(version.size(), 40)), version.data());
  out->keep_alive = version == "HTTP/1.1";
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    std::string_view line = head.substr(pos, e - pos);
    pos = e + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return error("malformed HTTP header line");
    std::string name = lower(line.substr(0, colon));
    std::string value(trim(line.substr(colon + 1)));
    if (name == "content-length") {
      int64_t n = -1;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || n < 0)
        return error("invalid Content-Length '%s'", value.substr(0, 40).c_str());
      if (out->content_length >= 0 && out->content_length != n) return error("conflicting Content-Length headers");
      out->content_length = n;
    } else if (name == "transfer-encoding") {
      if (contains_token(value, "chunked")) out->chunked = true;
    } else if (name == "connection") {
      if (contains_token(value, "close")) out->keep_alive = false;
      if (contains_token(value, "keep-alive")) out->keep_alive = true;
    }
    out->headers.emplace_back(std::move(name), std::move(value));
  }
  if (out->chunked) out->content_length = -1;  // RFC 9112 6.3: chunked wins
  return end + 4;
}

// ---------------------------------------------------------------------------------------------------------------

Status ChunkedDecoder::feed(std::string_view in, std::string* out) {
  size_t i = 0;
  while (i < in.size()) {
    const char c = in[i];
    switch (state_) {
      case State::kSize: {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d >= 0) {
          if (++size_digits_ > 15) return error("chunked encoding: chunk size has too many digits");
          remaining_ = remaining_ * 16 + static_cast<uint64_t>(d);
          ++i;
        } else if (size_digits_ == 0) {
          return error("chunked encoding: expected a hex chunk size, got byte 0x%02x", static_cast<unsigned char>(c));
        } else if (c == ';' || c == ' ' || c == '\t') {
          state_ = State::kSizeExt;
          ++i;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else {
          return error("chunked encoding: bad byte 0x%02x after chunk size", static_cast<unsigned char>(c));
        }
        break;
      }
      case State::kSizeExt:
        if (c == '\r') state_ = State::kSizeLf;
        ++i;
        break;
      case State::kSizeLf:
        if (c != '\n') return error("chunked encoding: missing LF after chunk size");
        ++i;
        size_digits_ = 0;
        if (remaining_ == 0) {
          state_ = State::kTrailer;
          trailer_line_len_ = 0;
        } else {
          state_ = State::kData;
        }
        break;
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
        out->append(in.data() + i, n);
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c != '\r') return error("chunked encoding: missing CRLF after chunk data");
        state_ = State::kDataLf;
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return error("chunked encoding: missing CRLF after chunk data");
        state_ = State::kSize;
        ++i;
        break;
      case State::kTrailer:
        // Trailer fields end with an empty line; we skip them.
        if (++trailer_bytes_ > kMaxHeaderBytes) return error("chunked encoding: trailer too large");
        if (c == '\n') {
          if (trailer_line_len_ == 0) state_ = State::kDone;
          trailer_line_len_ = 0;
        } else if (c != '\r') {
          ++trailer_line_len_;
        }
        ++i;
        break;
      case State::kDone:
        return error("chunked encoding: %zu unexpected bytes after the last chunk", in.size() - i);
    }
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------------

Status SseParser::line(std::string_view l, const std::function<bool(std::string_view)>& on_event, bool* stop) {
  if (l.empty()) {
    if (has_data_) {
      if (!on_event(data_)) *stop = true;
    }
    data_.clear();
    has_data_ = false;
    return Status::ok();
  }
  if (l[0] == ':') return Status::ok();  // comment
  const size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    if (data_.size() + value.size() > max_event_)
      return error("server-sent event exceeds %zu bytes", max_event_);
    data_.append(value);
    has_data_ = true;
  }
  return Status::ok();
}

Status SseParser::feed(std::string_view in, const std::function<bool(std::string_view)>& on_event) {
  bool stop = false;
  size_t start = 0;
  for (size_t i = 0; i < in.size() && !stop; ++i) {
    const char c = in[i];
    if (c != '\n' && c != '\r') continue;
    if (c == '\n' && last_cr_ && i == start && line_.empty()) {
      // The LF of a CRLF whose CR ended the previous line.
      last_cr_ = false;
      start = i + 1;
      continue;
    }
    last_cr_ = c == '\r';
    if (line_.empty()) {
      MOPT_TRY(line(in.substr(start, i - start), on_event, &stop));
    } else {
      line_.append(in.substr(start, i - start));
      MOPT_TRY(line(line_, on_event, &stop));
      line_.clear();
    }
    start = i + 1;
  }
  if (stop) return Status::ok();
  if (start < in.size()) {
    last_cr_ = false;
    if (line_.size() + (in.size() - start) > max_event_) return error("server-sent event line exceeds %zu bytes", max_event_);
    line_.append(in.substr(start));
  }
  return Status::ok();
}

}  // namespace mopt::loadgen
