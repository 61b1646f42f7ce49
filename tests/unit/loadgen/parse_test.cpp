#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/http_body.h"
#include "loadgen/net.h"
#include "loadgen/prometheus.h"

namespace mopt::loadgen {
namespace {

TEST(Chunked, DecodesByteByByte) {
  const std::string enc = "4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\n";
  // Feed in every split position and byte by byte: the result never depends on how bytes arrive.
  for (size_t split = 0; split <= enc.size(); ++split) {
    ChunkedDecoder d;
    std::string out;
    ASSERT_TRUE(d.feed(std::string_view(enc).substr(0, split), &out));
    ASSERT_TRUE(d.feed(std::string_view(enc).substr(split), &out));
    EXPECT_EQ(out, "Wikipedia in \r\n\r\nchunks.");
    EXPECT_TRUE(d.done());
  }
  ChunkedDecoder d;
  std::string out;
  for (char c : enc) ASSERT_TRUE(d.feed(std::string_view(&c, 1), &out));
  EXPECT_TRUE(d.done());
}

TEST(Chunked, RejectsGarbage) {
  std::string out;
  EXPECT_FALSE(ChunkedDecoder().feed("zz\r\n", &out));
  EXPECT_FALSE(ChunkedDecoder().feed("3\r\nabcX\r\n", &out));
  EXPECT_FALSE(ChunkedDecoder().feed("ffffffffffffffffff\r\n", &out));  // size overflow
  ChunkedDecoder d;
  ASSERT_TRUE(d.feed("0\r\n\r\n", &out));
  EXPECT_FALSE(d.feed("more", &out));
}

TEST(Sse, EventsAcrossLineEndingsAndSplits) {
  const std::string s = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\nid: 3\rdata: cr\r\rdata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "two\nlines", "cr", "[DONE]"};
  for (size_t split = 0; split <= s.size(); ++split) {
    SseParser p;
    std::vector<std::string> got;
    auto cb = [&](std::string_view d) {
      got.emplace_back(d);
      return true;
    };
    ASSERT_TRUE(p.feed(std::string_view(s).substr(0, split), cb));
    ASSERT_TRUE(p.feed(std::string_view(s).substr(split), cb));
    EXPECT_EQ(got, want) << "split at " << split;
  }
}

TEST(Sse, OversizeEventIsAnError) {
  SseParser p(16);
  auto st = p.feed("data: 0123456789abcdefghij\n\n", [](std::string_view) { return true; });
  EXPECT_FALSE(st);
}

TEST(Url, Parses) {
  auto u = parse_url("http://127.0.0.1:8080/v1/chat/completions");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "/v1/chat/completions");
  auto v6 = parse_url("http://[::1]:9000");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9000);
  EXPECT_EQ(parse_url("http://example.com")->port, 80);
  auto https = parse_url("https://api.openai.com");
  ASSERT_FALSE(https);
  EXPECT_NE(https.message().find("https is not supported"), std::string::npos);
  EXPECT_FALSE(parse_url("http://host:99999"));
  EXPECT_FALSE(parse_url("localhost:8000"));
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_FALSE(is_local_host("203.0.113.7"));  // TEST-NET-3, never local
}

TEST(Prometheus, ParsesCountersGaugesHistograms) {
  const char* text = R"(# HELP mopt:prompt_tokens_total Prompt tokens.
# TYPE mopt:prompt_tokens_total counter
mopt:prompt_tokens_total 1234
# TYPE mopt:num_requests_running gauge
mopt:num_requests_running{model="m \"q\" \\ x"} 3 1700000000000
# TYPE mopt:ttft_seconds histogram
mopt:ttft_seconds_bucket{le="0.1"} 2
mopt:ttft_seconds_bucket{le="+Inf"} 5
mopt:ttft_seconds_sum 1.5e-1
mopt:ttft_seconds_count 5
other_metric NaN
)";
  auto s = parse_prometheus(text);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(s->samples.size(), 7u);
  EXPECT_EQ(s->samples[0].type, MetricType::kCounter);
  EXPECT_DOUBLE_EQ(s->samples[0].value, 1234);
  EXPECT_EQ(s->samples[1].labels.at("model"), "m \"q\" \\ x");
  EXPECT_EQ(s->samples[1].type, MetricType::kGauge);
  EXPECT_EQ(s->samples[3].labels.at("le"), "+Inf");
  EXPECT_EQ(s->samples[3].family, "mopt:ttft_seconds");
  EXPECT_EQ(s->samples[3].type, MetricType::kHistogram);
  EXPECT_DOUBLE_EQ(s->samples[4].value, 0.15);
  EXPECT_TRUE(std::isnan(s->samples[6].value));
  EXPECT_EQ(s->samples[6].type, MetricType::kUntyped);
  ASSERT_NE(s->find("mopt:ttft_seconds_bucket{le=\"0.1\"}"), nullptr);
  bool found = false;
  EXPECT_DOUBLE_EQ(s->sum("mopt:ttft_seconds_bucket", &found), 7);
  EXPECT_TRUE(found);
}

TEST(Prometheus, RejectsMalformedLines) {
  for (const char* bad : {"metric{le=\"1\" 3\n", "metric{le=1} 3\n", "metric 1 2 3\n", "metric\n", "9metric 1\n",
                          "metric{a=\"x\\q\"} 1\n", "# TYPE m sprocket\n", "metric{a=\"1\",a=\"2\"} 1\n"}) {
    auto s = parse_prometheus(bad);
    EXPECT_FALSE(s) << bad;
    if (!s) EXPECT_NE(s.message().find("line 1"), std::string::npos) << s.message();
  }
}

TEST(Prometheus, Deltas) {
  auto before = parse_prometheus("# TYPE mopt:x counter\nmopt:x 10\nother 1\n");
  auto after = parse_prometheus("# TYPE mopt:x counter\nmopt:x 25\nmopt:y 3\nother 9\n");
  ASSERT_TRUE(before && after);
  auto d = metric_deltas(*before, *after, "mopt:");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "mopt:x");
  EXPECT_DOUBLE_EQ(d[0].after - d[0].before, 15);
  EXPECT_TRUE(d[0].in_before);
  EXPECT_FALSE(d[1].in_before);
}

}  // namespace
}  // namespace mopt::loadgen
