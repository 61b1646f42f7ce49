// Small socket helpers shared by the bench client and the fake server (Linux, non-blocking, IPv4/IPv6).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace mopt::loadgen {

// Monotonic nanoseconds (CLOCK_MONOTONIC, the clock std::chrono::steady_clock uses on Linux); comparable
// between the bench client and the fake server on one machine.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Url {
  std::string scheme, host;
  int port = 80;
  std::string path;  // "" when the URL has none
};
// Parses http://host[:port][/path]; https is rejected with a clear message.
Result<Url> parse_url(const std::string& url);
// True when host names this machine (localhost, loopback addresses, or an address of a local interface).
bool is_local_host(const std::string& host);

struct ResolvedAddr {
  int family = 0;
  unsigned len = 0;
  unsigned char storage[128] = {};
};
Result<ResolvedAddr> resolve(const std::string& host, int port);
// Starts a non-blocking connect (TCP_NODELAY set). Returns the fd.
Result<int> connect_nonblocking(const ResolvedAddr& addr);

// Arms timerfd `fd` (created on CLOCK_MONOTONIC) to fire once at now_ns() time `at_ns` (0 fires at once).
void arm_timer(int fd, int64_t at_ns);

struct HttpResponse {
  int status = 0;
  std::string body;
};
// A blocking one-shot HTTP/1.1 GET (used for /metrics and /health polling, not on the load path).
Result<HttpResponse> http_get(const std::string& host, int port, const std::string& path, double timeout_s);
// The same with a JSON body (e.g. POST /tokenize while a workload is prepared).
Result<HttpResponse> http_post_json(const std::string& host, int port, const std::string& path,
                                    const std::string& json_body, double timeout_s);
// Either of them: `method` GET (no body) or POST/PUT (`json_body` sent as application/json).
Result<HttpResponse> http_call(const std::string& host, int port, const std::string& method, const std::string& path,
                               const std::string& json_body, double timeout_s);

}  // namespace mopt::loadgen
