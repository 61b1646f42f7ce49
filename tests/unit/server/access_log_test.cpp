// The access log (server/access_log.h): one line per request through Server::handle, off with
// --disable-log-requests (ServeOptions::log_requests); and the periodic engine-stats line (server/stats_log.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/access_log.h"
#include "server/server.h"
#include "server/stats_log.h"
#include "server_call.h"

namespace mopt::server {
namespace {

TEST(AccessLog, LineHasMethodPathStatusDurationAndTokens) {
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.target = "/v1/completions?x=1";
  req.remote = "127.0.0.1:5000";
  AccessRecord rec;
  rec.id = "cmpl-00ff";
  rec.prompt_tokens = 5;
  rec.completion_tokens = 16;
  rec.ttft_s = 0.0214;
  rec.finish = "length";
  EXPECT_EQ(access_log_line(req, 200, 0.1534, rec),
            "access 127.0.0.1:5000 \"POST /v1/completions?x=1\" 200 0.153s id=cmpl-00ff prompt_tokens=5 "
            "completion_tokens=16 ttft=0.021s finish=length");
  rec.client_gone = true;  // the client went away: 499, as nginx writes it
  EXPECT_EQ(access_log_line(req, 200, 2.0, rec).rfind("access 127.0.0.1:5000 \"POST /v1/completions?x=1\" 499 2.000s", 0),
            0u);
  // Untrusted bytes cannot break the line or the quoting.
  req.target = "/a\"b\nc\\";
  EXPECT_EQ(access_log_line(req, 404, 0, {}), "access 127.0.0.1:5000 \"POST /a\\x22b\\x0ac\\x5c\" 404 0.000s");
}

TEST(AccessLog, OneLinePerRequestUnlessDisabled) {
  std::vector<std::string> lines;
  ServeOptions o;
  o.access_log = [&lines](const std::string& l) { lines.push_back(l); };
  {
    Server srv(o);
    call(srv, "GET", "/health");                // 503: loading
    call(srv, "POST", "/v1/completions");       // 503: loading
    call(srv, "GET", "/nope");                  // 404
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"GET /health\" 503 "), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"POST /v1/completions\" 503 "), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("\"GET /nope\" 404 "), std::string::npos) << lines[2];
  lines.clear();
  o.log_requests = false;  // --disable-log-requests
  Server quiet(o);
  call(quiet, "GET", "/health");
  EXPECT_TRUE(lines.empty());
}

// Errors the HTTP layer answers before routing (here a 413) get their own line, from the connection's thread.
TEST(AccessLog, ErrorsAnsweredBeforeRoutingAreLogged) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  ServeOptions o;
  o.port = 0;
  o.http.max_body_bytes = 1024;
  o.access_log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lk(mu);
    lines.push_back(l);
    cv.notify_all();
  };
  Server srv(o);
  ASSERT_TRUE(srv.listen());
  std::thread serving([&] { srv.serve(); });
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(srv.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nContent-Length: 100000\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  char buf[256];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 12);
  EXPECT_EQ(std::string(buf, 12), "HTTP/1.1 413");
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(30), [&] { return !lines.empty(); }));
    EXPECT_EQ(lines[0].rfind("access 127.0.0.1", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find(" - 413 error=\""), std::string::npos) << lines[0];
  }
  ::close(fd);
  srv.begin_drain();
  serving.join();
}

TEST(StatsLog, RatesOverTheIntervalAndSilenceWhenIdle) {
  EngineStats prev, cur;
  prev.prompt_tokens = 100;
  prev.generation_tokens = 50;
  prev.prefix_cache_queries = 10;
  prev.prefix_cache_hits = 2;
  cur = prev;
  cur.prompt_tokens += 400;  // over 2 s: 200 prompt tokens/s
  cur.generation_tokens += 100;
  cur.prefix_cache_queries += 400;
  cur.prefix_cache_hits += 100;
  cur.running = 3;
  cur.waiting = 1;
  cur.kv_usage = 0.125;
  cur.preemptions = 2;
  EXPECT_EQ(stats_log_line(prev, cur, 2.0).value_or(""),
            "stats: prompt 200.0 tokens/s, generation 50.0 tokens/s, running 3, waiting 1, swapped 0, KV cache "
            "12.5%, prefix cache hit rate 25.0%, preemptions +2");
  EXPECT_FALSE(stats_log_line(prev, prev, 10.0)) << "an idle interval writes nothing";
  EngineStats queued = prev;
  queued.waiting = 2;  // nothing computed, but requests wait: still a line
  EXPECT_TRUE(stats_log_line(prev, queued, 10.0));
}

TEST(StatsLog, LoggerWritesFromItsThread) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  uint64_t generated = 0;
  {
    StatsLogger log(
        [&] {
          std::lock_guard<std::mutex> lk(mu);
          EngineStats s;
          s.generation_tokens = generated += 10;  // busy: every interval has tokens
          return s;
        },
        [&](const std::string& l) {
          std::lock_guard<std::mutex> lk(mu);
          lines.push_back(l);
          cv.notify_all();
        },
        0.01);
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(30), [&] { return lines.size() >= 2; }));
  }
  EXPECT_EQ(lines[0].rfind("stats: prompt 0.0 tokens/s, generation ", 0), 0u) << lines[0];
}

}  // namespace
}  // namespace mopt::server
