// Runs one request through Server::handle over a socket pair and returns the raw response (head and body).
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "server/server.h"

namespace mopt::server {

inline std::string call(Server& srv, const std::string& method, const std::string& path, Headers headers = {}) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  HttpRequest req;
  req.method = method;
  req.path = req.target = path;
  req.version = "HTTP/1.1";
  req.headers = std::move(headers);
  if (method == "POST") req.headers.emplace_back("content-type", "application/json");
  HttpLimits lim;
  ResponseWriter w(sv[0], lim, false, method == "HEAD");
  srv.handle(req, w);
  ::close(sv[0]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(sv[1], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(sv[1]);
  return out;
}

}  // namespace mopt::server
