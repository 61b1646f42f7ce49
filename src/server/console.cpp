#include "server/console.h"

#include <cstdint>

#include "engine/sha256.h"

namespace mopt::server {
namespace assets {
// Written by cmake/embed_file.cmake from src/server/web/console.html.
extern const unsigned char kConsoleHtml[];
extern const size_t kConsoleHtmlSize;
}  // namespace assets

namespace {

// Base64 (RFC 4648, with padding) of a digest, as CSP hash sources spell it. No library here has one; it is a few
// lines.
std::string base64(const Sha256Digest& d) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < d.size(); i += 3) {
    const uint32_t b0 = d[i], b1 = i + 1 < d.size() ? d[i + 1] : 0, b2 = i + 2 < d.size() ? d[i + 2] : 0;
    const uint32_t v = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < d.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < d.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// The CSP source of the one inline element `tag` (e.g. "script"): 'sha256-<base64 of its text>'.
std::string inline_hash(const std::string& page, const std::string& tag) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t a = page.find(open), b = page.find(close);
  MOPT_CHECK(a != std::string::npos && b != std::string::npos && b > a && page.find(open, a + 1) == std::string::npos,
             "the web console page must hold exactly one <%s> element", tag.c_str());
  const size_t start = a + open.size();
  return "'sha256-" + base64(Sha256::hash(std::string_view(page).substr(start, b - start))) + "'";
}

bool segment_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '~' || c == '-';
}

}  // namespace

Status check_root_path(const std::string& root) {
  if (root.empty()) return Status::ok();
  const char* hint = " (give the prefix a proxy serves mopt under, e.g. --root-path /llm)";
  if (root[0] != '/' || root.back() == '/') return error("--root-path '%s' must start with '/' and not end with '/'%s",
                                                         root.c_str(), hint);
  size_t seg = 1;
  for (size_t i = 1; i <= root.size(); ++i) {
    if (i < root.size() && root[i] != '/') {
      if (!segment_char(root[i]))
        return error("--root-path '%s': the character '%c' is not allowed (use letters, digits, '.', '_', '~', '-')%s",
                     root.c_str(), root[i], hint);
      continue;
    }
    const std::string_view s = std::string_view(root).substr(seg, i - seg);
    if (s.empty() || s == "." || s == "..")
      return error("--root-path '%s' has an empty, '.' or '..' segment%s", root.c_str(), hint);
    seg = i + 1;
  }
  return Status::ok();
}

std::string strip_root_path(const std::string& path, std::string_view root) {
  if (root.empty() || path.compare(0, root.size(), root) != 0) return path;
  if (path.size() == root.size()) return "/";
  if (path[root.size()] != '/') return path;  // "/llm2" is not under "/llm"
  return path.substr(root.size());
}

WebConsole::WebConsole(const std::string& root_path)
    : page_(reinterpret_cast<const char*>(assets::kConsoleHtml), assets::kConsoleHtmlSize) {
  static const std::string kMeta = "<meta name=\"mopt-root-path\" content=\"\">";
  const size_t at = page_.find(kMeta);
  MOPT_CHECK(at != std::string::npos, "the web console page has no mopt-root-path <meta> tag");
  // check_root_path() admits no character that needs escaping in an attribute.
  page_.replace(at, kMeta.size(), "<meta name=\"mopt-root-path\" content=\"" + root_path + "\">");
  const std::string csp = "default-src 'none'; script-src " + inline_hash(page_, "script") + "; style-src " +
                          inline_hash(page_, "style") +
                          "; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                          "frame-ancestors 'none'";
  headers_ = {{"Content-Type", "text/html; charset=utf-8"},
              {"Content-Security-Policy", csp},
              {"X-Content-Type-Options", "nosniff"},
              {"X-Frame-Options", "DENY"},
              {"Referrer-Policy", "no-referrer"},
              {"Cache-Control", "no-cache"}};
}

}  // namespace mopt::server
