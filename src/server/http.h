// A small HTTP/1.1 server on top of poll(): keep-alive, Content-Length request bodies, Content-Length and chunked
// responses (for SSE), and hard limits.
//
// Why not cpp-httplib 0.11 (Debian's build): its limits are compile-time macros baked into the shared library
// (8 KiB header limit answered by dropping the connection, no 431), a handler cannot see its socket, so a client
// that disconnects while a non-streaming request is being generated cannot be detected (the request would keep its
// KV blocks until it finishes), and its stop() gives no way to finish in-flight responses with a deadline while
// refusing new ones. Here every connection runs on its own thread (bounded by max_connections; 256+ concurrent
// streams are the design point), reads with a deadline, and the handler can ask whether its client is gone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/tls.h"

namespace mopt::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;   // as sent: /v1/completions?x=1
  std::string path;     // without the query
  std::string version;  // "HTTP/1.1"
  Headers headers;      // names lower-cased
  std::string body;
  std::string remote;   // peer address

  // First value of header `name` (lower-case), or "" if absent.
  const std::string& header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;     // request line + headers
  size_t max_headers = 100;                // header lines
  size_t max_body_bytes = 4 * 1024 * 1024; // Content-Length cap (413 beyond)
  int read_timeout_ms = 30'000;            // to receive a whole request once its first byte arrived (408 beyond)
  int idle_timeout_ms = 30'000;            // keep-alive: wait for the next request
  int write_timeout_ms = 30'000;           // one send() may block this long (slow readers are dropped)
  int max_connections = 1024;              // beyond: 503 and close
};

// Given to the handler to answer one request: either send() once, or begin_stream() + write_chunk()* + end_stream().
class ResponseWriter {
 public:
  // tls: the connection's TLS session (nullptr: plain TCP).
  ResponseWriter(int fd, const HttpLimits& lim, bool keep_alive, bool head_only, TlsSession* tls = nullptr)
      : fd_(fd), lim_(lim), keep_alive_(keep_alive), head_only_(head_only), tls_(tls) {}

  // Full response with Content-Length. False if the client is gone.
  bool send(int status, const Headers& headers, std::string_view body);
  // Chunked response (Transfer-Encoding: chunked). False if the client is gone.
  bool begin_stream(int status, const Headers& headers);
  bool write_chunk(std::string_view data);
  bool end_stream();
  // An interim response's raw head ("HTTP/1.1 100 Continue\r\n\r\n"); the final response follows.
  bool send_interim(std::string_view raw) { return write_all(raw); }

  // True when the peer has closed or reset the connection (polls the socket, does not block).
  bool client_gone() const;
  // Ask to close the connection after this response (e.g. while draining).
  void set_close() { keep_alive_ = false; }

  bool responded() const { return state_ != State::kNone; }
  bool complete() const { return state_ == State::kDone; }
  bool failed() const { return failed_; }
  bool keep_alive() const { return keep_alive_; }
  int status() const { return status_; }

 private:
  enum class State { kNone, kStreaming, kDone };
  bool write_all(std::string_view data);
  std::string head(int status, const Headers& headers, const char* framing);

  int fd_;
  const HttpLimits& lim_;
  bool keep_alive_;
  bool head_only_;
  TlsSession* tls_;
  bool failed_ = false;
  int status_ = 0;
  State state_ = State::kNone;
};

using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;
// Builds the body of an error the HTTP layer itself answers (400/408/413/431/503/505): status, message, code.
using HttpErrorBody = std::function<std::string(int status, const std::string& message, const std::string& code)>;

// Told of each such error answered on a connection (the access log): the peer, the status and the message.
using HttpErrorLog = std::function<void(const std::string& remote, int status, const std::string& message)>;

class HttpServer {
 public:
  // tls: serve HTTPS with this context (nullptr: plain HTTP). error_log: see HttpErrorLog (unset: none).
  HttpServer(HttpLimits limits, HttpHandler handler, HttpErrorBody error_body,
             std::shared_ptr<const TlsContext> tls = nullptr, HttpErrorLog error_log = {});
  ~HttpServer();

  // Binds and listens (port 0 = any free port; see port()). A clear error when the address is in use.
  Status listen(const std::string& host, int port);
  int port() const { return port_; }

  // Accept loop on the calling thread; returns after stop_accepting().
  void serve();
  // Closes the listening socket (new connections are refused); open connections finish their current request
  // and close. Safe from any thread (not from a signal handler: use a flag and call it from a normal thread).
  void stop_accepting();
  // Waits until no connection is open or `seconds` passed; true if idle.
  bool wait_idle(double seconds);
  // Shuts down every open connection (after the grace period).
  void close_all();
  bool draining() const { return draining_.load(); }
  int active_connections() const { return active_.load(); }  // connections open (in flight or idle keep-alive)

 private:
  void connection(int fd, std::string remote);
  // HTTPS: a plain HTTP request gets a 400 saying to use https (as nginx answers), then the handshake runs within
  // the read timeout. nullptr: close the connection (the log says why).
  std::unique_ptr<TlsSession> start_tls(int fd, const std::string& remote);

  HttpLimits lim_;
  HttpHandler handler_;
  HttpErrorBody error_body_;
  HttpErrorLog error_log_;
  std::shared_ptr<const TlsContext> tls_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // self-pipe that wakes serve() on stop_accepting()
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<int> open_fds_;  // under mu_
};

// Constant-time comparison of secrets (API keys): time depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace mopt::server
