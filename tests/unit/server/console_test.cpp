// The web console's routes in Server::handle (the page itself is tested in a browser: tests/deploy/console.mjs):
// --root-path checks and stripping, the page and its security headers, --no-web-console, /model_card's key.
#include <gtest/gtest.h>

#include "server/console.h"
#include "server/server.h"
#include "server_call.h"

namespace mopt::server {
namespace {

int status_of(const std::string& response) { return std::stoi(response.substr(9, 3)); }

TEST(Console, RootPathChecks) {
  for (const char* ok : {"", "/llm", "/a/b", "/team-1/v_2.0~x"}) EXPECT_TRUE(check_root_path(ok).is_ok()) << ok;
  for (const char* bad : {"llm", "/", "/llm/", "/a//b", "/a/./b", "/a/../b", "/..", "/a b", "/a\"b", "/<x>", "/a?b"}) {
    Status s = check_root_path(bad);
    EXPECT_FALSE(s.is_ok()) << bad;
    EXPECT_NE(s.message().find("--root-path"), std::string::npos) << s.message();
  }
}

TEST(Console, RootPathStripping) {
  EXPECT_EQ(strip_root_path("/llm", "/llm"), "/");
  EXPECT_EQ(strip_root_path("/llm/", "/llm"), "/");
  EXPECT_EQ(strip_root_path("/llm/v1/models", "/llm"), "/v1/models");
  EXPECT_EQ(strip_root_path("/v1/models", "/llm"), "/v1/models");  // the proxy stripped it already
  EXPECT_EQ(strip_root_path("/llm2/v1/models", "/llm"), "/llm2/v1/models");  // not under the prefix
  EXPECT_EQ(strip_root_path("/v1/models", ""), "/v1/models");
}

TEST(Console, PageAndHeaders) {
  WebConsole c("/team/llm");
  EXPECT_NE(c.page().find("<meta name=\"mopt-root-path\" content=\"/team/llm\">"), std::string::npos);
  EXPECT_EQ(c.page().find("content=\"\">"), std::string::npos);
  std::string csp;
  for (const auto& [k, v] : c.headers())
    if (k == "Content-Security-Policy") csp = v;
  EXPECT_NE(csp.find("script-src 'sha256-"), std::string::npos) << csp;
  EXPECT_NE(csp.find("style-src 'sha256-"), std::string::npos) << csp;
  EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
}

TEST(Console, Routes) {
  ServeOptions o;
  o.api_key = "secret";
  o.root_path = "/llm";
  Server srv(o);
  for (const char* path : {"/", "/llm", "/llm/"}) {
    std::string r = call(srv, "GET", path);  // no key needed, and served while the model loads
    EXPECT_EQ(status_of(r), 200) << path;
    EXPECT_NE(r.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
    EXPECT_NE(r.find("X-Frame-Options: DENY"), std::string::npos);
    EXPECT_EQ(r.find("secret"), std::string::npos) << "the page must not hold the key";
  }
  std::string head = call(srv, "HEAD", "/llm/");
  EXPECT_EQ(status_of(head), 200);
  EXPECT_EQ(head.find("<html"), std::string::npos) << "HEAD has no body";
  EXPECT_EQ(status_of(call(srv, "POST", "/")), 405);
  EXPECT_EQ(status_of(call(srv, "GET", "/llm2/")), 404);

  EXPECT_EQ(status_of(call(srv, "GET", "/llm/model_card")), 401);
  const Headers key{{"authorization", "Bearer secret"}};
  EXPECT_EQ(status_of(call(srv, "GET", "/llm/model_card", key)), 503) << "loading";
}

TEST(Console, Off) {
  ServeOptions o;
  o.web_console = false;
  Server srv(o);
  std::string r = call(srv, "GET", "/");
  EXPECT_EQ(status_of(r), 404);
  EXPECT_NE(r.find("--no-web-console"), std::string::npos) << r;
  EXPECT_EQ(status_of(call(srv, "GET", "/health")), 503);  // the other routes are unchanged (loading)
}

}  // namespace
}  // namespace mopt::server
