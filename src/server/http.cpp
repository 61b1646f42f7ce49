#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/http_head.h"
#include "core/log.h"
#include "core/strfmt.h"
#include "core/strings.h"

namespace mopt::server {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d < 0 ? 0 : static_cast<int>(std::min<int64_t>(d, 1 << 30));
}

// A lingering close (as nginx does): stops sending, then reads and drops what the client still sends, up to
// `max_bytes`, until it was quiet for 1 s or 5 s passed. Closing with unread bytes would reset the connection,
// and the client could lose the answer it was just sent (e.g. a 413 while it still uploads the body).
void linger(int fd, size_t max_bytes) {
  ::shutdown(fd, SHUT_WR);
  char tmp[16384];
  size_t total = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (total < max_bytes) {
    pollfd p{fd, POLLIN, 0};
    const int left = std::min(1000, ms_left(deadline));
    if (left == 0 || ::poll(&p, 1, left) <= 0) break;
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

}  // namespace

const std::string& HttpRequest::header(std::string_view name) const {
  static const std::string empty;
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return empty;
}

bool HttpRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& kv) { return kv.first == name; });
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare over the longer length so the time does not reveal the matching prefix.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  volatile unsigned char sink = diff;
  return sink == 0;
}

// ------------------------------------------------------------------------------------------------ ResponseWriter

bool ResponseWriter::write_all(std::string_view data) {
  if (failed_) return false;
  size_t off = 0;
  auto deadline = Clock::now() + std::chrono::milliseconds(lim_.write_timeout_ms);
  while (off < data.size()) {
    short wait = POLLOUT;
    ssize_t n = tls_ ? tls_->write(data.data() + off, data.size() - off, wait)
                     : ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && !tls_ && errno == EINTR) continue;
    if (tls_ ? n == TlsSession::kWouldBlock : n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, wait, 0};
      int left = ms_left(deadline);
      if (left == 0 || ::poll(&p, 1, left) <= 0 || (p.revents & (POLLERR | POLLHUP))) break;
      continue;
    }
    break;
  }
  if (off < data.size()) failed_ = true;
  return !failed_;
}

std::string ResponseWriter::head(int status, const Headers& headers, const char* framing) {
  status_ = status;
  std::string h = strfmt("HTTP/1.1 %d %s\r\n", status, http::reason_phrase(status));
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  h += framing;
  h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

bool ResponseWriter::send(int status, const Headers& headers, std::string_view body) {
  if (state_ != State::kNone) return false;
  state_ = State::kDone;
  std::string out = head(status, headers, strfmt("Content-Length: %zu\r\n", body.size()).c_str());
  if (!head_only_) out.append(body);
  return write_all(out);
}

bool ResponseWriter::begin_stream(int status, const Headers& headers) {
  if (state_ != State::kNone) return false;
  state_ = State::kStreaming;
  return write_all(head(status, headers, "Transfer-Encoding: chunked\r\n"));
}

bool ResponseWriter::write_chunk(std::string_view data) {
  if (state_ != State::kStreaming) return false;
  if (data.empty()) return !failed_;
  std::string out = strfmt("%zx\r\n", data.size());
  out.append(data);
  out += "\r\n";
  return write_all(out);
}

bool ResponseWriter::end_stream() {
  if (state_ != State::kStreaming) return false;
  state_ = State::kDone;
  return write_all("0\r\n\r\n");
}

bool ResponseWriter::client_gone() const {
  if (failed_) return true;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  int r = ::poll(&p, 1, 0);
  if (r <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {  // data or EOF: peek to tell them apart (pipelined bytes are not a disconnect)
    char c;
    ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

// ------------------------------------------------------------------------------------------------ HttpServer

HttpServer::HttpServer(HttpLimits limits, HttpHandler handler, HttpErrorBody error_body,
                       std::shared_ptr<const TlsContext> tls, HttpErrorLog error_log)
    : lim_(limits),
      handler_(std::move(handler)),
      error_body_(std::move(error_body)),
      error_log_(std::move(error_log)),
      tls_(std::move(tls)) {}

HttpServer::~HttpServer() {
  stop_accepting();
  close_all();
  wait_idle(10.0);  // connection threads reference this object
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_fd_)
    if (fd >= 0) ::close(fd);
}

Status HttpServer::listen(const std::string& host, int port) {
  if (port < 0 || port > 65535) return error("--port must be in [0, 65535], got %d", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0) return error("cannot resolve --host '%s': %s", host.c_str(), gai_strerror(rc));
  std::string last_err = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_err = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_err = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    return error("cannot listen on %s:%d: %s (is another server using the port? pick another with --port)",
                 host.c_str(), port, last_err.c_str());
  if (::pipe2(wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0) return error("pipe: %s", std::strerror(errno));
  return Status::ok();
}

void HttpServer::serve() {
  while (!draining_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    int r = ::poll(p, 2, 1000);
    if (r < 0 && errno != EINTR) break;
    if (draining_.load()) break;
    if (r <= 0 || !(p[0].revents & POLLIN)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    char addr[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, addr, sizeof addr);
    else if (ss.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, addr, sizeof addr);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (active_.load() >= lim_.max_connections) {
      if (tls_) {  // a plain-text 503 would be garbage to a TLS client, and a handshake costs what the limit saves
        MOPT_LOG_WARN("http: refused a connection from %s: %d connections open (--max-connections)", addr,
                      lim_.max_connections);
        ::close(fd);
        continue;
      }
      ResponseWriter w(fd, lim_, false, false);
      w.send(503, {{"Content-Type", "application/json"}, {"Retry-After", "1"}},
             error_body_(503, strfmt("too many open connections (limit %d); retry later", lim_.max_connections),
                         "server_busy"));
      ::close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_fds_.push_back(fd);
      active_.fetch_add(1);
    }
    try {
      std::thread(&HttpServer::connection, this, fd, std::string(addr)).detach();
    } catch (const std::system_error&) {  // out of threads: refuse this one
      {
        std::lock_guard<std::mutex> lk(mu_);
        open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
        active_.fetch_sub(1);
      }
      ::close(fd);
    }
  }
  ::close(listen_fd_);  // from now on connection attempts are refused
  listen_fd_ = -1;
}

void HttpServer::stop_accepting() {
  bool was = draining_.exchange(true);
  if (was) return;
  if (wake_fd_[1] >= 0) {  // serve() wakes up and closes the listening socket
    char c = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_[1], &c, 1);
  }
}

bool HttpServer::wait_idle(double seconds) {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return active_.load() == 0; });
}

void HttpServer::close_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
}

std::unique_ptr<TlsSession> HttpServer::start_tls(int fd, const std::string& remote) {
  // A TLS connection opens with a handshake record (first byte 22); an HTTP request with a method's capital letter.
  pollfd p{fd, POLLIN, 0};
  char first = 0;
  if (::poll(&p, 1, lim_.read_timeout_ms) <= 0 || ::recv(fd, &first, 1, MSG_PEEK) != 1) {
    MOPT_LOG_INFO("http: %s sent no TLS handshake within %d ms (or closed); closing", remote.c_str(),
                  lim_.read_timeout_ms);
    return nullptr;
  }
  if (first >= 'A' && first <= 'Z') {
    ResponseWriter w(fd, lim_, false, false);
    w.send(400, {{"Content-Type", "application/json"}},
           error_body_(400, "this server speaks HTTPS (TLS): send the request to https://, not http://",
                       "tls_required"));
    linger(fd, 64 * 1024);
    MOPT_LOG_INFO("http: %s sent plain HTTP to the HTTPS port; answered 400", remote.c_str());
    return nullptr;
  }
  auto session = std::make_unique<TlsSession>(*tls_, fd);
  if (Status st = session->handshake(lim_.read_timeout_ms); !st) {
    MOPT_LOG_INFO("http: %s: %s", remote.c_str(), st.message().c_str());
    return nullptr;
  }
  return session;
}

void HttpServer::connection(int fd, std::string remote) {
  const http::HeadLimits head_limits{lim_.max_header_bytes, lim_.max_headers};
  std::string buf;  // bytes received and not yet consumed (pipelining)
  std::unique_ptr<TlsSession> tls;
  auto respond_error = [&](int status, const std::string& msg, const std::string& code) {
    ResponseWriter w(fd, lim_, false, false, tls.get());
    Headers h{{"Content-Type", "application/json"}};
    if (status == 503) h.emplace_back("Retry-After", "1");
    w.send(status, h, error_body_(status, msg, code));
    if (error_log_) error_log_(remote, status, msg);
  };
  // Reads until buf holds `want` bytes; returns false on close/timeout (timed_out tells which).
  auto fill = [&](Clock::time_point deadline, size_t want, bool& timed_out) {
    timed_out = false;
    char tmp[16384];
    short wait = POLLIN;
    while (buf.size() < want) {
      pollfd p{fd, wait, 0};
      int left = ms_left(deadline);
      // Bytes TLS already decrypted are not visible to poll().
      int r = tls && tls->pending() ? 1 : left > 0 ? ::poll(&p, 1, std::min(left, 1000)) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        if (left == 0) {
          timed_out = true;
          return false;
        }
        if (draining_.load() && buf.empty()) return false;  // idle keep-alive connection while draining
        continue;
      }
      if (r < 0) return false;
      wait = POLLIN;
      ssize_t n = tls ? tls->read(tmp, sizeof tmp, wait) : ::recv(fd, tmp, sizeof tmp, 0);
      if (tls && n == TlsSession::kWouldBlock) continue;
      if (!tls && n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
    return true;
  };

  const bool ready = !tls_ || (tls = start_tls(fd, remote)) != nullptr;
  while (ready) {
    // ---- request head: the idle timeout until the first byte, then the read timeout for the whole request
    bool timed_out = false;
    if (buf.empty() && !fill(Clock::now() + std::chrono::milliseconds(lim_.idle_timeout_ms), 1, timed_out)) break;
    auto deadline = Clock::now() + std::chrono::milliseconds(lim_.read_timeout_ms);
    http::Head head;
    http::HeadParse parsed;
    for (;;) {
      parsed = http::parse_head(buf, http::HeadKind::kRequest, head_limits, &head);
      if (!parsed.ok() || parsed.used > 0) break;
      if (!fill(deadline, buf.size() + 1, timed_out)) break;
    }
    if (!parsed.ok()) {
      respond_error(parsed.error_status, parsed.error, parsed.error_status == 431 ? "headers_too_large" : "bad_request");
      break;
    }
    if (parsed.used == 0) {
      if (timed_out)
        respond_error(408, strfmt("the request was not received within %d ms", lim_.read_timeout_ms), "timeout");
      break;
    }
    buf.erase(0, parsed.used);
    HttpRequest req;
    req.remote = remote;
    req.method = std::move(head.method);
    req.target = std::move(head.target);
    req.version = std::move(head.version);
    req.path = req.target.substr(0, req.target.find('?'));
    req.headers = std::move(head.headers);

    // ---- body framing
    if (req.has_header("transfer-encoding")) {
      respond_error(411, "chunked request bodies are not supported: send a Content-Length", "length_required");
      break;
    }
    const size_t body_len = head.content_length < 0 ? 0 : static_cast<size_t>(head.content_length);
    if (body_len > lim_.max_body_bytes) {
      respond_error(413, strfmt("request body is %zu bytes; the limit is %zu", body_len, lim_.max_body_bytes),
                    "body_too_large");
      // The client may be sending the body still (no Expect: 100-continue): let it, so that it reads the 413.
      if (!tls) linger(fd, std::min<size_t>(body_len, size_t{64} << 20));
      break;
    }
    if (body_len > 0 && lower(req.header("expect")) == "100-continue" && buf.empty()) {
      if (!ResponseWriter(fd, lim_, true, false, tls.get()).send_interim("HTTP/1.1 100 Continue\r\n\r\n")) break;
    }
    if (buf.size() < body_len && !fill(deadline, body_len, timed_out)) {
      if (timed_out)
        respond_error(408, strfmt("the request body was not received within %d ms", lim_.read_timeout_ms),
                      "timeout");
      break;
    }
    req.body = buf.substr(0, body_len);
    buf.erase(0, body_len);

    // ---- dispatch
    const bool keep_alive = head.keep_alive && !draining_.load();
    ResponseWriter w(fd, lim_, keep_alive, req.method == "HEAD", tls.get());
    try {
      handler_(req, w);
    } catch (const std::exception& e) {
      MOPT_LOG_ERROR("http: handler for %s %s threw: %s", req.method.c_str(), req.path.c_str(), e.what());
    }
    if (!w.responded())
      w.send(500, {{"Content-Type", "application/json"}}, error_body_(500, "internal server error", "internal_error"));
    if (w.failed() || !w.keep_alive() || !w.complete()) break;
  }
  if (tls) tls->close_notify();
  std::lock_guard<std::mutex> lk(mu_);  // erase before close: close_all() must never see a reused fd number
  open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  if (active_.fetch_sub(1) == 1) idle_cv_.notify_all();
}

}  // namespace mopt::server
