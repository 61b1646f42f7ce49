#include "server/tls.h"

#include <fcntl.h>
#include <poll.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

namespace mopt::server {
namespace {

// OpenSSL's queued errors, most recent last, as one line ("" when there are none); clears the queue.
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<TlsContext>> TlsContext::create(const std::string& cert_file, const std::string& key_file) {
  for (const auto& [flag, file] : {std::pair{"--ssl-certfile", &cert_file}, std::pair{"--ssl-keyfile", &key_file}}) {
    FILE* f = std::fopen(file->c_str(), "rb");
    if (!f) return error("%s '%s': cannot open it: %s", flag, file->c_str(), std::strerror(errno));
    std::fclose(f);
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return error("cannot create a TLS context: %s", ssl_errors().c_str());
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);  // a close without close_notify reads as the end
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return error("--ssl-certfile '%s' is not a PEM certificate (chain): %s", cert_file.c_str(), ssl_errors().c_str());
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
      return error("--ssl-keyfile '%s' is not the key of the certificate in --ssl-certfile '%s': %s",
                   key_file.c_str(), cert_file.c_str(), ssl_errors().c_str());
    return error("--ssl-keyfile '%s' is not an unencrypted PEM private key: %s", key_file.c_str(),
                 ssl_errors().c_str());
  }
  if (SSL_CTX_check_private_key(ctx) != 1)
    return error("--ssl-keyfile '%s' is not the key of the certificate in --ssl-certfile '%s': %s", key_file.c_str(),
                 cert_file.c_str(), ssl_errors().c_str());
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsSession::TlsSession(const TlsContext& ctx, int fd) : ssl_(SSL_new(ctx.get())), fd_(fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (ssl_) SSL_set_fd(ssl_, fd);
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

Status TlsSession::handshake(int timeout_ms) {
  if (!ssl_) return error("cannot create a TLS session: %s", ssl_errors().c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_accept(ssl_);
    if (r == 1) return Status::ok();
    const int e = SSL_get_error(ssl_, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      std::string why = ssl_errors();
      if (why.empty()) why = e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN ? "the client closed the connection"
                                                                                   : "error " + std::to_string(e);
      return error("TLS handshake failed: %s", why.c_str());
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return error("TLS handshake not finished within %d ms", timeout_ms);
  }
}

long TlsSession::result(int r, short& wait) {
  if (r > 0) return r;
  switch (SSL_get_error(ssl_, r)) {
    case SSL_ERROR_WANT_READ: wait = POLLIN; return kWouldBlock;
    case SSL_ERROR_WANT_WRITE: wait = POLLOUT; return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN: return 0;  // close_notify
    default: ERR_clear_error(); return -1;
  }
}

long TlsSession::read(char* buf, size_t n, short& wait) {
  ERR_clear_error();
  return result(SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 30))), wait);
}

long TlsSession::write(const char* buf, size_t n, short& wait) {
  ERR_clear_error();
  return result(SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 30))), wait);
}

bool TlsSession::pending() const { return SSL_pending(ssl_) > 0; }

void TlsSession::close_notify() {
  if (SSL_is_init_finished(ssl_)) SSL_shutdown(ssl_);
  ERR_clear_error();
}

}  // namespace mopt::server
