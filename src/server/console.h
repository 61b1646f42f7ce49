// The web console: one self-contained HTML page (src/server/web/console.html, embedded at build time by
// cmake/embed_file.cmake) served at GET / by `mopt serve` unless --no-web-console. It calls the server's own routes
// (chat and completions, /metrics, /model_card) from the browser, sending the API key the user types in.
//
// --root-path PREFIX: the server is reached behind a proxy under PREFIX. The page learns PREFIX from a <meta> tag
// and builds every URL on it; the server answers both PREFIX/route (proxy kept the prefix) and /route (proxy
// stripped it).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "server/http.h"

namespace mopt::server {

// "" or "/a/b": starts with '/', no trailing '/', no empty, "." or ".." segment, only [A-Za-z0-9._~-] in segments.
Status check_root_path(const std::string& root_path);

// The route a request path names once `root_path` is taken off its front ("/prefix" -> "/", "/prefix/x" -> "/x");
// a path outside the prefix is returned as it is.
std::string strip_root_path(const std::string& path, std::string_view root_path);

class WebConsole {
 public:
  explicit WebConsole(const std::string& root_path);
  const std::string& page() const { return page_; }
  // Content-Type plus the security headers: a Content-Security-Policy that allows only this page's own script and
  // style (by their SHA-256) and requests to this origin, no framing, no sniffing, no referrer.
  const Headers& headers() const { return headers_; }

 private:
  std::string page_;
  Headers headers_;
};

}  // namespace mopt::server
