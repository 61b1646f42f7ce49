#include "server/access_log.h"

#include "core/strfmt.h"

namespace mopt::server {
namespace {

// The client's bytes are untrusted: quotes, backslashes and non-printable bytes become \xHH, so one request stays
// one line and a reader can split the quoted part.
std::string escaped(const std::string& s, size_t max_len) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') out += strfmt("\\x%02x", c);
    else out += static_cast<char>(c);
  }
  if (s.size() > max_len) out += "...";
  return out;
}

}  // namespace

std::string access_log_line(const HttpRequest& req, int status, double duration_s, const AccessRecord& rec) {
  const int shown = rec.client_gone ? 499 : status;
  std::string line = strfmt("access %s \"%s %s\" %d %.3fs", req.remote.empty() ? "-" : req.remote.c_str(),
                            escaped(req.method, 16).c_str(), escaped(req.target.empty() ? req.path : req.target,
                                                                     512).c_str(), shown, duration_s);
  if (!rec.id.empty()) line += " id=" + escaped(rec.id, 300);
  if (rec.prompt_tokens >= 0) line += strfmt(" prompt_tokens=%d", rec.prompt_tokens);
  if (rec.completion_tokens >= 0) line += strfmt(" completion_tokens=%d", rec.completion_tokens);
  if (rec.ttft_s >= 0) line += strfmt(" ttft=%.3fs", rec.ttft_s);
  if (!rec.finish.empty()) line += " finish=" + rec.finish;
  return line;
}

std::string access_error_line(const std::string& remote, int status, const std::string& message) {
  return strfmt("access %s - %d error=\"%s\"", remote.empty() ? "-" : escaped(remote, 64).c_str(), status,
                escaped(message, 300).c_str());
}

}  // namespace mopt::server
