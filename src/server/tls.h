// TLS for the HTTP server (--ssl-keyfile / --ssl-certfile), with Debian's OpenSSL: one context per server, one
// session per connection. Sessions run over non-blocking sockets: read()/write() never block, and say which poll
// event to wait for when they cannot go on. TLS 1.2 is the oldest version accepted.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

struct ssl_ctx_st;
struct ssl_st;

namespace mopt::server {

class TlsContext {
 public:
  // Loads a PEM certificate chain and its private key; clear errors for a missing or unreadable file, a file that
  // is not PEM, and a key that does not belong to the certificate.
  static Result<std::unique_ptr<TlsContext>> create(const std::string& cert_file, const std::string& key_file);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return ctx_; }

 private:
  explicit TlsContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

class TlsSession {
 public:
  // Returned by read()/write() when the socket must first become ready for `wait` (POLLIN or POLLOUT).
  static constexpr long kWouldBlock = -2;

  TlsSession(const TlsContext& ctx, int fd);  // sets fd non-blocking
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // The server side of the handshake, within timeout_ms; the error says why it failed (for the log).
  Status handshake(int timeout_ms);
  // Decrypted bytes (> 0), 0 when the peer closed, -1 on an error, kWouldBlock (then poll for `wait`).
  long read(char* buf, size_t n, short& wait);
  // Bytes written (> 0), -1 on an error, kWouldBlock (then poll for `wait`).
  long write(const char* buf, size_t n, short& wait);
  // Decrypted bytes held inside the session (a poll on the socket would not see them).
  bool pending() const;
  // Sends close_notify (best effort, never blocks).
  void close_notify();

 private:
  long result(int r, short& wait);
  ssl_st* ssl_;
  int fd_;
};

}  // namespace mopt::server
