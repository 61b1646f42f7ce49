#include "loadgen/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/http_head.h"
#include "loadgen/http_body.h"

namespace mopt::loadgen {

Result<Url> parse_url(const std::string& url) {
  Url u;
  const size_t sep = url.find("://");
  if (sep == std::string::npos) return error("invalid URL '%s': expected http://host[:port][/path]", url.c_str());
  u.scheme = url.substr(0, sep);
  if (u.scheme == "https")
    return error("URL '%s': https is not supported by mopt bench; use the server's plain http address or a local "
                 "TLS-terminating proxy", url.c_str());
  if (u.scheme != "http") return error("URL '%s': unsupported scheme '%s' (use http://)", url.c_str(), u.scheme.c_str());
  std::string rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) u.path = rest.substr(slash);
  if (hostport.empty()) return error("URL '%s' has no host", url.c_str());
  if (hostport[0] == '[') {  // [::1]:8000
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return error("URL '%s': unterminated IPv6 address", url.c_str());
    u.host = hostport.substr(1, close - 1);
    hostport = hostport.substr(close + 1);
    if (!hostport.empty() && hostport[0] != ':') return error("URL '%s': junk after IPv6 address", url.c_str());
  } else {
    const size_t colon = hostport.rfind(':');
    u.host = hostport.substr(0, colon);
    hostport = colon == std::string::npos ? "" : hostport.substr(colon);
  }
  if (!hostport.empty()) {
    const std::string p = hostport.substr(1);
    int port = 0;
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (ec != std::errc() || ptr != p.data() + p.size() || port < 1 || port > 65535)
      return error("URL '%s': invalid port '%s' (1..65535)", url.c_str(), p.c_str());
    u.port = port;
  }
  if (u.host.empty()) return error("URL '%s' has no host", url.c_str());
  return u;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 || host == "0.0.0.0") return true;
  char hn[256] = {};
  if (gethostname(hn, sizeof hn - 1) == 0 && host == hn) return true;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    else if (i->ifa_addr->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
    local = buf[0] && host == buf;
  }
  freeifaddrs(ifs);
  return local;
}

Result<ResolvedAddr> resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || !res) return error("cannot resolve host '%s': %s", host.c_str(), gai_strerror(rc));
  ResolvedAddr a;
  a.family = res->ai_family;
  a.len = static_cast<unsigned>(res->ai_addrlen);
  std::memcpy(a.storage, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof a.storage));
  freeaddrinfo(res);
  return a;
}

void arm_timer(int fd, int64_t at_ns) {
  itimerspec ts{};
  ts.it_value.tv_sec = at_ns / 1000000000;
  ts.it_value.tv_nsec = at_ns % 1000000000;
  if (ts.it_value.tv_sec == 0 && ts.it_value.tv_nsec == 0) ts.it_value.tv_nsec = 1;  // all zero would disarm it
  timerfd_settime(fd, TFD_TIMER_ABSTIME, &ts, nullptr);
}

Result<int> connect_nonblocking(const ResolvedAddr& addr) {
  const int fd = socket(addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return error("socket(): %s", std::strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, reinterpret_cast<const sockaddr*>(addr.storage), addr.len) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    close(fd);
    return error("connect(): %s", std::strerror(e));
  }
  return fd;
}

Result<HttpResponse> http_get(const std::string& host, int port, const std::string& path, double timeout_s) {
  return http_call(host, port, "GET", path, "", timeout_s);
}

Result<HttpResponse> http_post_json(const std::string& host, int port, const std::string& path,
                                    const std::string& json_body, double timeout_s) {
  return http_call(host, port, "POST", path, json_body, timeout_s);
}

Result<HttpResponse> http_call(const std::string& host, int port, const std::string& method, const std::string& path,
                               const std::string& json_body, double timeout_s) {
  MOPT_ASSIGN_OR_RETURN(ResolvedAddr addr, resolve(host, port));
  MOPT_ASSIGN_OR_RETURN(int fd, connect_nonblocking(addr));
  const int64_t deadline = now_ns() + static_cast<int64_t>(timeout_s * 1e9);
  auto wait = [&](short events) -> Status {
    for (;;) {
      const int64_t left_ms = (deadline - now_ns()) / 1000000;
      if (left_ms <= 0)
        return error("%s http://%s:%d%s timed out after %.1fs", method.c_str(), host.c_str(), port, path.c_str(),
                     timeout_s);
      pollfd p{fd, events, 0};
      const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
      if (r > 0) return Status::ok();
      if (r < 0 && errno != EINTR) return error("poll(): %s", std::strerror(errno));
    }
  };
  auto run = [&]() -> Result<HttpResponse> {
    MOPT_TRY(wait(POLLOUT));
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) return error("cannot connect to %s:%d: %s", host.c_str(), port, std::strerror(err));
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
                      "\r\nConnection: close\r\nAccept: */*\r\n";
    if (method != "GET")
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(json_body.size()) + "\r\n";
    req += "\r\n" + json_body;
    size_t off = 0;
    while (off < req.size()) {
      const ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n > 0) off += static_cast<size_t>(n);
      else if (n < 0 && errno == EAGAIN) MOPT_TRY(wait(POLLOUT));
      else return error("send to %s:%d failed: %s", host.c_str(), port, std::strerror(errno));
    }
    std::string in, body;
    http::Head head;
    size_t head_len = 0;
    ChunkedDecoder chunked;
    constexpr size_t kMaxBody = 64u << 20;
    char buf[65536];
    for (;;) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        MOPT_TRY(wait(POLLIN));
        continue;
      }
      if (n < 0) return error("recv from %s:%d failed: %s", host.c_str(), port, std::strerror(errno));
      std::string_view data(buf, static_cast<size_t>(n));
      if (head_len == 0) {
        in.append(data);
        const http::HeadParse parsed = http::parse_head(in, http::HeadKind::kResponse, {}, &head);
        if (!parsed.ok()) return error("response from %s:%d: %s", host.c_str(), port, parsed.error.c_str());
        head_len = parsed.used;
        if (head_len == 0) {
          if (n == 0) return error("%s:%d closed the connection before sending a response", host.c_str(), port);
          continue;
        }
        data = std::string_view(in).substr(head_len);
      }
      if (head.chunked) MOPT_TRY(chunked.feed(data, &body));
      else body.append(data);
      if (body.size() > kMaxBody) return error("response from %s:%d%s exceeds 64 MiB", host.c_str(), port, path.c_str());
      const bool complete = head.chunked ? chunked.done()
                            : head.content_length >= 0 ? body.size() >= static_cast<size_t>(head.content_length)
                                                       : n == 0;
      if (complete) {
        if (head.content_length >= 0) body.resize(static_cast<size_t>(head.content_length));
        return HttpResponse{head.status, std::move(body)};
      }
      if (n == 0) return error("%s:%d closed the connection mid-response", host.c_str(), port);
    }
  };
  auto r = run();
  close(fd);
  return r;
}

}  // namespace mopt::loadgen
