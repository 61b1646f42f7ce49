#include "loadgen/http_body.h"

#include <algorithm>

namespace mopt::loadgen {

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
        if (++trailer_bytes_ > kMaxTrailerBytes) return error("chunked encoding: trailer too large");
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
