// SLO/goodput, summaries, charts, workloads, the /metrics monitor, and hostile servers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include "loadgen/charts.h"
#include "loadgen/fake_server.h"
#include "loadgen/monitor.h"
#include "loadgen/report.h"

namespace mopt::loadgen {
namespace {

RequestRecord rec(double ttft, double e2e, int tokens, std::vector<double> itl = {}) {
  RequestRecord r;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.usage_completion_tokens = tokens;
  r.content_events = tokens;
  r.itl_s = std::move(itl);
  return r;
}

TEST(Slo, ParseAndGoodput) {
  auto s = SloSpec::parse("ttft=500ms,tpot=50,e2e=2s");
  ASSERT_TRUE(s) << s.message();
  EXPECT_DOUBLE_EQ(s->ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(s->tpot_s, 0.05);  // bare number = ms
  EXPECT_DOUBLE_EQ(s->e2e_s, 2);
  EXPECT_FALSE(SloSpec::parse("ttft"));
  EXPECT_FALSE(SloSpec::parse("speed=5ms"));
  EXPECT_FALSE(SloSpec::parse("ttft=fast"));
  EXPECT_TRUE(SloSpec::parse("")->empty());

  // tpot = (e2e - ttft) / (tokens - 1).
  PhaseResult p;
  p.records.push_back(rec(0.1, 0.1 + 9 * 0.04, 10));   // good: ttft 100ms, tpot 40ms
  p.records.push_back(rec(0.6, 0.6 + 9 * 0.01, 10));   // ttft too slow
  p.records.push_back(rec(0.1, 0.1 + 9 * 0.06, 10));   // tpot too slow
  p.records.push_back(rec(0.2, 0.2, 1));               // one token: no tpot, good
  RequestRecord bad = rec(0.1, 0.2, 3);
  bad.error = ErrorKind::kHttpStatus;
  p.records.push_back(bad);
  p.wall_s = 2.0;
  LoadSpec spec;
  spec.concurrency = 3;
  const RunSummary sum = summarize_run(p, spec, *s);
  EXPECT_EQ(sum.completed, 5);
  EXPECT_EQ(sum.failed, 1);
  EXPECT_EQ(sum.errors.at("http_status"), 1);
  EXPECT_EQ(sum.good, 2);
  EXPECT_DOUBLE_EQ(sum.goodput, 1.0);
  EXPECT_DOUBLE_EQ(sum.request_throughput, 2.0);
  EXPECT_EQ(sum.output_tokens, 31);
  EXPECT_EQ(sum.tpot.n, 3u);
  EXPECT_NEAR(sum.tpot.p50, 0.04, 1e-12);
  EXPECT_EQ(sum.label, "concurrency=3");
  // The JSON document keeps every request and the SLO verdict.
  RunResult run;
  run.spec = spec;
  run.phase = p;
  run.summary = sum;
  auto j = results_json({{"k", 1}}, {run}, *s);
  ASSERT_EQ(j["runs"][0]["requests"].size(), 5u);
  EXPECT_EQ(j["runs"][0]["requests"][0]["slo_met"], true);
  EXPECT_EQ(j["runs"][0]["requests"][1]["slo_met"], false);
  EXPECT_EQ(j["runs"][0]["requests"][4]["error"], "http_status");
  EXPECT_NEAR(j["runs"][0]["summary"]["tpot_s"]["p50"].get<double>(), 0.04, 1e-12);
  const std::string table = format_summary(run, *s);
  EXPECT_NE(table.find("goodput"), std::string::npos);
  EXPECT_NE(table.find("http_status=1"), std::string::npos);
}

TEST(Charts, NiceTicks) {
  auto expect_ticks = [](std::vector<double> got, std::vector<double> want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
  };
  expect_ticks(nice_ticks(0, 10, 5), {0, 2, 4, 6, 8, 10});
  expect_ticks(nice_ticks(0, 0.93, 5), {0, 0.2, 0.4, 0.6, 0.8, 1.0});
  expect_ticks(nice_ticks(13, 87, 5), {0, 20, 40, 60, 80, 100});
  auto t = nice_ticks(13, 87, 5);
  EXPECT_LE(t.front(), 13);
  EXPECT_GE(t.back(), 87);
  EXPECT_LE(t.size(), 12u);
  EXPECT_GE(nice_ticks(5, 5).size(), 2u);  // degenerate range still gives an axis
}

TEST(Charts, SvgHasAxesSeriesAndLegend) {
  Panel p{"Throughput", "concurrency", "req/s", {}};
  p.series.push_back({"ok <&>", {{1, 10}, {2, 19}, {4, 35}}, true});
  const std::string svg = render_svg("title", {p}, 1);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("ok &lt;&amp;&gt;"), std::string::npos);  // escaped legend text
  EXPECT_NE(svg.find(">concurrency<"), std::string::npos);
  EXPECT_NE(svg.find(">40<"), std::string::npos);  // y tick above the max
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(Workload, SyntheticSharedPrefixAndFiles) {
  WorkloadOptions o;
  o.input_len = Distribution::fixed(5);
  o.output_len = *Distribution::parse("uniform:10,20", false);
  o.shared_prefix_len = 8;
  o.num_prefixes = 2;
  auto w = Workload::create(o);
  ASSERT_TRUE(w);
  std::set<std::string> prefixes;
  for (int i = 0; i < 50; ++i) {
    WorkItem it = w->next();
    EXPECT_EQ(it.expected_prompt_tokens, 13);
    EXPECT_GE(it.max_tokens, 10);
    EXPECT_LE(it.max_tokens, 20);
    // The first 8 words are one of the 2 prefixes.
    size_t pos = 0;
    for (int k = 0; k < 8; ++k) pos = it.prompt.find(' ', pos) + 1;
    prefixes.insert(it.prompt.substr(0, pos));
  }
  EXPECT_EQ(prefixes.size(), 2u);

  const std::string path = ::testing::TempDir() + "/bad_sharegpt.json";
  std::ofstream(path) << "{\"not\": \"an array\"}";
  WorkloadOptions s;
  s.kind = WorkloadOptions::Kind::kShareGpt;
  s.path = path;
  auto bad = Workload::create(s);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("not a JSON array"), std::string::npos);
  std::ofstream(path) << "[{\"conversations\": [{\"from\": \"gpt\", \"value\": \"x\"}]}]";
  bad = Workload::create(s);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("no usable conversation"), std::string::npos);
  s.path = path + ".missing";
  EXPECT_FALSE(Workload::create(s));
}

TEST(Monitor, DeltasMatchTheFakeServersCounters) {
  FakeServerOptions fo;
  fo.itl = Distribution::fixed(0.001);
  auto srv = FakeServer::start(fo);
  ASSERT_TRUE(srv);
  Target t;
  t.port = (*srv)->port();
  WorkloadOptions wo;
  wo.input_len = Distribution::fixed(7);
  wo.output_len = Distribution::fixed(6);
  auto w = Workload::create(wo);
  LoadSpec spec;
  spec.concurrency = 4;
  spec.num_requests = 30;
  Monitor mon("127.0.0.1", t.port, "mopt:", 0.05, false);
  mon.start();
  auto r = run_phase(t, *w, spec);
  ASSERT_TRUE(r);
  MonitorResult m = mon.stop();
  ASSERT_TRUE(m.metrics_available) << m.metrics_note;
  bool found = false;
  EXPECT_DOUBLE_EQ(m.delta("mopt:generation_tokens_total", &found), 180);
  EXPECT_TRUE(found);
  EXPECT_DOUBLE_EQ(m.delta("mopt:prompt_tokens_total"), 210);
  EXPECT_DOUBLE_EQ(m.delta("mopt:time_to_first_token_seconds_count"), 30);
  ASSERT_TRUE(m.gauges.count("mopt:num_requests_running"));
  EXPECT_LE(m.gauges["mopt:num_requests_running"].max, 4);
  EXPECT_NE(m.gpu_note.find("skipped"), std::string::npos);

  // No server: the monitor says why instead of failing the run.
  const int port = t.port;
  (*srv)->stop();
  srv->reset();
  Monitor gone("127.0.0.1", port, "mopt:", 0.05, false);
  gone.start();
  MonitorResult g = gone.stop();
  EXPECT_FALSE(g.metrics_available);
  EXPECT_NE(g.metrics_note.find("not collected"), std::string::npos);
}

// A raw TCP server that answers every connection with fixed bytes and closes.
class HostileServer {
 public:
  explicit HostileServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 64);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    th_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) close(c);
          return;
        }
        char buf[4096];
        [[maybe_unused]] ssize_t n = recv(c, buf, sizeof buf, 0);
        [[maybe_unused]] ssize_t m = send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        close(c);
      }
    });
  }
  ~HostileServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    th_.join();
  }
  int port() const { return port_; }

 private:
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread th_;
};

TEST(Hostile, BrokenServersGiveClassifiedErrors) {
  const std::string sse_head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
  auto chunk = [](const std::string& s) { return strfmt("%zx\r\n", s.size()) + s + "\r\n"; };
  struct Case {
    std::string reply;
    ErrorKind kind;
    const char* message_part;
  } cases[] = {
      {"garbage\r\n\r\n", ErrorKind::kProtocol, "status line"},
      {sse_head + "ZZ\r\n", ErrorKind::kProtocol, "chunk size"},
      {sse_head + chunk("data: {not json}\n\n"), ErrorKind::kProtocol, "not a JSON object"},
      {sse_head + chunk("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"), ErrorKind::kClosed, "after 1 text events"},
      {sse_head + chunk("data: {\"error\":{\"message\":\"model exploded\"}}\n\n") + chunk("data: [DONE]\n\n") + "0\r\n\r\n",
       ErrorKind::kServerError, "model exploded"},
      {sse_head + chunk("data: [DONE]\n\n") + "0\r\n\r\n", ErrorKind::kNoTokens, "without any text"},
      {"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 33\r\n\r\n{\"error\":{\"message\":\"slow down\"}}",
       ErrorKind::kHttpStatus, "HTTP 429: slow down"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", ErrorKind::kProtocol, "Content-Length"},
  };
  for (const Case& c : cases) {
    HostileServer hs(c.reply);
    Target t;
    t.port = hs.port();
    t.timeout_s = 5;
    WorkloadOptions wo;
    wo.input_len = Distribution::fixed(2);
    wo.output_len = Distribution::fixed(2);
    auto w = Workload::create(wo);
    LoadSpec spec;
    spec.num_requests = 2;
    auto r = run_phase(t, *w, spec);
    ASSERT_TRUE(r) << r.message();
    for (const auto& q : r->records) {
      EXPECT_EQ(q.error, c.kind) << c.reply << " -> " << q.error_message;
      EXPECT_NE(q.error_message.find(c.message_part), std::string::npos) << q.error_message;
    }
  }
}

}  // namespace
}  // namespace mopt::loadgen
