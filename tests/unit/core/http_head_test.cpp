// core/http_head: the one HTTP head parser of the server and the load generator.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/http_head.h"

namespace mopt::http {
namespace {

HeadParse parse(std::string_view s, HeadKind kind, Head* h, HeadLimits lim = {}) { return parse_head(s, kind, lim, h); }

TEST(HttpHead, ParsesResponse) {
  const std::string r =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: gzip, Chunked\r\n"
      "Content-Length: 7\r\nX-Thing:  spaced \t\r\n\r\nBODY";
  Head h;
  const HeadParse p = parse(r, HeadKind::kResponse, &h);
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.used, r.size() - 4);
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.version, "HTTP/1.1");
  EXPECT_TRUE(h.chunked);
  EXPECT_EQ(h.content_length, -1);  // chunked framing wins over Content-Length
  EXPECT_TRUE(h.keep_alive);
  ASSERT_NE(h.find("x-thing"), nullptr);
  EXPECT_EQ(*h.find("x-thing"), "spaced");
  EXPECT_EQ(*h.find("content-type"), "text/event-stream");
  EXPECT_EQ(h.find("Content-Type"), nullptr);  // names are stored lower-cased
  ASSERT_EQ(h.headers.size(), 4u);
  EXPECT_EQ(h.headers[1].first, "transfer-encoding");

  ASSERT_TRUE(parse("HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\n\r\nabc", HeadKind::kResponse, &h).complete());
  EXPECT_EQ(h.status, 404);
  EXPECT_FALSE(h.keep_alive);  // HTTP/1.0 default
  EXPECT_EQ(h.content_length, 3);
  ASSERT_TRUE(parse("HTTP/1.1 204\r\n\r\n", HeadKind::kResponse, &h).complete());  // no reason phrase
  EXPECT_EQ(h.status, 204);
  EXPECT_EQ(h.content_length, -1);
}

TEST(HttpHead, ParsesRequest) {
  Head h;
  const std::string r = "POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
  const HeadParse p = parse(r, HeadKind::kRequest, &h);
  ASSERT_TRUE(p.complete()) << p.error;
  EXPECT_EQ(p.used, r.size() - 2);
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/v1/completions?x=1");
  EXPECT_EQ(h.status, 0);
  EXPECT_FALSE(h.keep_alive);
  EXPECT_EQ(h.content_length, 2);
  ASSERT_TRUE(parse("OPTIONS * HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", HeadKind::kRequest, &h).complete());
  EXPECT_TRUE(h.keep_alive);  // HTTP/1.0 keeps the connection only when asked
  ASSERT_TRUE(parse("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n", HeadKind::kRequest, &h).complete());
  EXPECT_FALSE(h.keep_alive);
  ASSERT_TRUE(parse("GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", HeadKind::kRequest, &h).ok());
  EXPECT_EQ(h.content_length, 5);  // repeated but equal: accepted
}

TEST(HttpHead, IncompleteIsNotAnError) {
  Head h;
  for (const char* s : {"", "GET / HTTP/1.1\r\nHost: x\r\n", "HTTP/1.1 200 OK\r\nA: b\r\n\r"}) {
    const HeadParse p = parse(s, s[0] == 'G' ? HeadKind::kRequest : HeadKind::kResponse, &h);
    EXPECT_TRUE(p.ok()) << s;
    EXPECT_EQ(p.used, 0u) << s;
  }
}

// Each bad head: the status a server answers it with and a word of the message.
TEST(HttpHead, MalformedHeadsSayWhatAndWhichStatus) {
  struct Case {
    HeadKind kind;
    std::string head;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {HeadKind::kResponse, "HTTP/1.1 2x0 OK\r\n\r\n", 400, "status line"},
      {HeadKind::kResponse, "HTTP/1.1 700 Odd\r\n\r\n", 400, "status line"},
      {HeadKind::kResponse, "HTTP/1.1 2000 OK\r\n\r\n", 400, "status line"},
      {HeadKind::kResponse, "HTTP/2 200 OK\r\n\r\n", 505, "HTTP/2"},
      {HeadKind::kResponse, "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", 400, "Content-Length"},
      {HeadKind::kResponse, "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400,
       "Content-Length"},
      {HeadKind::kResponse, "HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n", 400, "Content-Length"},
      {HeadKind::kResponse, "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", 400, "header line"},
      {HeadKind::kRequest, "GET / HTTP/1.1\r\n bad fold\r\n\r\n", 400, "header line"},
      {HeadKind::kRequest, "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "header line"},
      {HeadKind::kRequest, std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 26), 400, "NUL"},
      {HeadKind::kRequest, "GET / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", 400, "disagree"},
      {HeadKind::kRequest, "GET /  HTTP/1.1\r\n\r\n", 400, "request line"},
      {HeadKind::kRequest, "GET x HTTP/1.1\r\n\r\n", 400, "request line"},
      {HeadKind::kRequest, "G(T / HTTP/1.1\r\n\r\n", 400, "request line"},
      {HeadKind::kRequest, "GET /\r\n\r\n", 400, "request line"},
      {HeadKind::kRequest, "GET / HTTP/3\r\n\r\n", 505, "HTTP/1.0 and HTTP/1.1"},
  };
  for (const Case& c : cases) {
    Head h;
    const HeadParse p = parse(c.head, c.kind, &h);
    EXPECT_EQ(p.error_status, c.status) << c.head;
    EXPECT_NE(p.error.find(c.says), std::string::npos) << c.head << " -> " << p.error;
    EXPECT_EQ(p.used, 0u);
  }
}

TEST(HttpHead, Limits) {
  Head h;
  const HeadLimits lim{64, 2};
  // No end of head within the limit: 431 without waiting for more bytes.
  HeadParse p = parse("GET / HTTP/1.1\r\nX: " + std::string(60, 'a'), HeadKind::kRequest, &h, lim);
  EXPECT_EQ(p.error_status, 431) << p.error;
  EXPECT_NE(p.error.find("64 bytes"), std::string::npos) << p.error;
  // The whole head, blank line included, must fit: 64 bytes exactly pass, 65 fail.
  const std::string fits = "GET / HTTP/1.1\r\nX: " + std::string(41, 'a') + "\r\n\r\n";
  ASSERT_EQ(fits.size(), 64u);
  EXPECT_TRUE(parse(fits, HeadKind::kRequest, &h, lim).complete());
  EXPECT_EQ(parse(fits.substr(0, 19) + "a" + fits.substr(19), HeadKind::kRequest, &h, lim).error_status, 431);
  p = parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", HeadKind::kRequest, &h, lim);
  EXPECT_EQ(p.error_status, 431);
  EXPECT_NE(p.error.find("more than 2 HTTP header lines"), std::string::npos) << p.error;
  EXPECT_TRUE(parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", HeadKind::kRequest, &h, lim).complete());
}

// Hostile heads, read as a server reads them (more bytes at a time): random edits of valid heads give, at every
// prefix, a verdict the rest of the bytes cannot undo. A head that completes is incomplete at every shorter prefix
// and complete, with the same length, at every longer one; a prefix that is refused means the whole is refused; a
// refusal is a 400, 431 or 505 with a message.
TEST(HttpHead, MutatedHeadsAreJudgedAlikeAtEveryPrefix) {
  const std::string bases[] = {
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n",
      "GET /metrics?x=1 HTTP/1.0\r\nAccept: */*\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"};
  const std::string alphabet = "\r\n :/-,\t0123456789aHTP.\x80";
  const HeadLimits lim{200, 8};
  uint64_t state = 12345;
  auto rnd = [&](size_t n) {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<size_t>((z ^ (z >> 31)) % n);
  };
  int complete = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = bases[rnd(std::size(bases))];
    for (int e = 1 + static_cast<int>(rnd(3)); e > 0 && !t.empty(); --e) {
      const size_t pos = rnd(t.size());
      if (rnd(2)) t[pos] = alphabet[rnd(alphabet.size())];
      else t.erase(pos, 1 + rnd(3));
    }
    Head h;
    const HeadParse full = parse(t, HeadKind::kRequest, &h, lim);
    complete += full.complete();
    if (!full.ok()) {
      EXPECT_TRUE(full.error_status == 400 || full.error_status == 431 || full.error_status == 505) << t;
      EXPECT_FALSE(full.error.empty()) << t;
    }
    for (size_t k = 0; k < t.size(); ++k) {
      const HeadParse p = parse(std::string_view(t).substr(0, k), HeadKind::kRequest, &h, lim);
      if (full.complete()) {
        if (k < full.used) EXPECT_TRUE(p.ok() && p.used == 0) << "prefix " << k << " of " << t << ": " << p.error;
        else EXPECT_TRUE(p.complete() && p.used == full.used) << "prefix " << k << " of " << t;
      } else {
        EXPECT_FALSE(p.complete()) << "prefix " << k << " of " << t;
        if (!p.ok()) {
          EXPECT_FALSE(full.ok()) << "prefix " << k << " refused (" << p.error << "), whole not: " << t;
        }
      }
    }
  }
  std::printf("%d of 3000 mutated heads complete\n", complete);
  EXPECT_GT(complete, 300);
}

TEST(HttpHead, ListsToken) {
  const std::pair<const char*, bool> close_in[] = {
      {" close ", true}, {"keep-alive,Close", true}, {"notclose, closed", false}, {"", false}, {",,", false}};
  for (const auto& [value, listed] : close_in) EXPECT_EQ(lists_token(value, "close"), listed) << value;
  EXPECT_TRUE(lists_token("gzip, Chunked", "chunked"));
}

TEST(HttpHead, ReasonPhrases) {
  const std::pair<int, const char*> phrases[] = {
      {200, "OK"}, {431, "Request Header Fields Too Large"}, {505, "HTTP Version Not Supported"}, {299, "Unknown"}};
  for (const auto& [status, phrase] : phrases) EXPECT_STREQ(reason_phrase(status), phrase);
}

}  // namespace
}  // namespace mopt::http
