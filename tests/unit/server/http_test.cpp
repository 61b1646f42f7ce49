// The HTTP/1.1 layer over real loopback sockets: framing, keep-alive, limits, timeouts, disconnect detection, drain.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/http.h"

namespace mopt::server {
namespace {

class HttpFixture : public ::testing::Test {
 protected:
  void start(HttpLimits lim) {
    srv_ = std::make_unique<HttpServer>(
        lim, [this](const HttpRequest& req, ResponseWriter& w) { handle(req, w); },
        [](int status, const std::string& msg, const std::string& code) {
          return "{\"error\":{\"message\":\"" + msg + "\",\"code\":\"" + code + "\"}}";
        });
    ASSERT_TRUE(srv_->listen("127.0.0.1", 0).is_ok());
    thread_ = std::thread([this] { srv_->serve(); });
  }
  void TearDown() override {
    signal(released_);  // a /held handler of a test that failed early
    if (srv_) {
      srv_->stop_accepting();
      srv_->close_all();
      if (thread_.joinable()) thread_.join();
      srv_->wait_idle(5);
    }
  }
  void handle(const HttpRequest& req, ResponseWriter& w) {
    if (req.path == "/stream") {
      w.begin_stream(200, {{"Content-Type", "text/event-stream"}});
      for (int i = 0; i < 3; ++i) w.write_chunk("data: " + std::to_string(i) + "\n\n");
      w.end_stream();
    } else if (req.path == "/held") {  // answers once the test releases it
      signal(started_);
      wait_for(released_, std::chrono::seconds(30));
      w.send(200, {}, "held done");
    } else if (req.path == "/wait") {  // waits for the client to go away (up to 10 s)
      signal(started_);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!w.client_gone() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      saw_gone_ = w.client_gone();
      w.send(200, {}, "late");
      signal(handler_done_);
    } else {
      w.send(200, {{"Content-Type", "text/plain"}}, req.method + " " + req.target + " " + req.body);
    }
  }
  int connect_client() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(srv_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  // Sends `data` and reads until the server closes (or, failing that, `ms` pass).
  std::string roundtrip(const std::string& data, int ms = 10000, int fd = -1) {
    bool own = fd < 0;
    if (own) fd = connect_client();
    if (!data.empty()) ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    if (own) ::close(fd);
    return out;
  }

  // Events between the handlers (server threads) and the test: set once, waited for with a deadline.
  void signal(bool& flag) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      flag = true;
    }
    cv_.notify_all();
  }
  bool wait_for(bool& flag, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return flag; });
  }

  std::unique_ptr<HttpServer> srv_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;       // a /held or /wait handler is running
  bool released_ = false;      // the /held handler may answer
  bool handler_done_ = false;  // the /wait handler returned
  std::atomic<bool> saw_gone_{false};
};

TEST_F(HttpFixture, ContentLengthBodyAndKeepAlive) {
  start({});
  std::string r = roundtrip("POST /echo?x=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /two HTTP/1.1\r\n"
                            "Connection: close\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 20\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("POST /echo?x=1 hello"), std::string::npos) << r;
  EXPECT_NE(r.find("GET /two "), std::string::npos) << r;  // second pipelined request on the same connection
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos);
}

// A body over the limit sent whole, without Expect: 100-continue: the client must still read the 413 (the server
// drains the body before it closes, rather than resetting the connection under the client's upload).
TEST_F(HttpFixture, OversizedBodyWithoutExpectGetsThe413) {
  HttpLimits lim;
  lim.max_body_bytes = 1024;
  start(lim);
  const std::string body(8 << 20, 'x');
  const int fd = connect_client();
  size_t sent = 0;
  std::thread uploader([&] {
    const std::string head = "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    size_t off = 0;
    while (off < body.size()) {
      const ssize_t n = ::send(fd, body.data() + off, body.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    sent = off;
  });
  uploader.join();
  // The upload was not cut (a client that sees its send fail never reads the answer): the server read and dropped it.
  EXPECT_EQ(sent, body.size());
  const std::string r = roundtrip("", 10000, fd);
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("body_too_large"), std::string::npos);
}

TEST_F(HttpFixture, ChunkedStreaming) {
  start({});
  std::string r = roundtrip("GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
}

TEST_F(HttpFixture, Limits) {
  HttpLimits lim;
  lim.max_header_bytes = 1024;
  lim.max_body_bytes = 100;
  lim.read_timeout_ms = 300;
  start(lim);
  EXPECT_EQ(roundtrip("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n").rfind("HTTP/1.1 431", 0), 0u);
  EXPECT_EQ(roundtrip("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n").rfind("HTTP/1.1 413", 0), 0u);
  EXPECT_EQ(roundtrip("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").rfind("HTTP/1.1 408", 0), 0u);
  EXPECT_EQ(roundtrip("GET / HTTP/1.1\r\nHost: x").rfind("HTTP/1.1 408", 0), 0u);
  EXPECT_EQ(roundtrip("GET / HTTP/3\r\n\r\n").rfind("HTTP/1.1 505", 0), 0u);
  EXPECT_EQ(roundtrip("GET / HTTP/1.1\r\n bad fold\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(roundtrip("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(roundtrip("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").rfind("HTTP/1.1 411", 0), 0u);
  // Still serving after all of that.
  EXPECT_EQ(roundtrip("GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST_F(HttpFixture, DetectsClientDisconnectWhileHandling) {
  start({});
  int fd = connect_client();
  std::string req = "GET /wait HTTP/1.1\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  ASSERT_TRUE(wait_for(started_, std::chrono::seconds(30))) << "the handler never started";
  ::close(fd);
  ASSERT_TRUE(wait_for(handler_done_, std::chrono::seconds(30))) << "the handler never returned";
  EXPECT_TRUE(saw_gone_.load()) << "the handler ran 10 s after the client closed without seeing it gone";
}

bool connect_refused(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool refused = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0;
  ::close(fd);
  return refused;
}

TEST_F(HttpFixture, DrainRefusesNewConnectionsAndFinishesOpenOnes) {
  start({});
  int fd = connect_client();
  std::string req = "GET /held HTTP/1.1\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  ASSERT_TRUE(wait_for(started_, std::chrono::seconds(30))) << "the handler never started";
  srv_->stop_accepting();
  thread_.join();  // serve() returned: the listening socket is closed
  // Refused while the request is still in flight (its handler waits for released_).
  EXPECT_TRUE(connect_refused(srv_->port())) << "a new connection was accepted while draining";
  EXPECT_EQ(srv_->active_connections(), 1);
  signal(released_);
  // The in-flight request is answered, then the server closes the connection (no keep-alive while draining):
  // roundtrip() returns at the close, and no connection is left although this end is still open.
  std::string r = roundtrip("", 30000, fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_NE(r.find("held done"), std::string::npos) << r;
  EXPECT_TRUE(srv_->wait_idle(30)) << "the server kept the connection open";
  ::close(fd);
}

TEST(HttpListen, PortInUseIsAClearError) {
  HttpServer a({}, [](const HttpRequest&, ResponseWriter& w) { w.send(200, {}, ""); },
               [](int, const std::string& m, const std::string&) { return m; });
  ASSERT_TRUE(a.listen("127.0.0.1", 0).is_ok());
  HttpServer b({}, [](const HttpRequest&, ResponseWriter& w) { w.send(200, {}, ""); },
               [](int, const std::string& m, const std::string&) { return m; });
  Status s = b.listen("127.0.0.1", a.port());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--port"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mopt::server
