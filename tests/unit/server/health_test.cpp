// /health follows engine progress, not just process liveness. A real engine cannot be made to stall on demand, so
// this test drives Server::handle with a stand-in Engine whose stats report a stalled step loop.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/server.h"
#include "server_call.h"

namespace mopt::server {
namespace {

class StalledEngine final : public Engine {
 public:
  double last_step = 0;
  bool pending = true;
  AddResult add_request(RequestSpec, OutputCallback) override { return {0, AddError::kStopped, "stub"}; }
  void abort(uint64_t) override {}
  Result<WarmupReport> warmup(const WarmupProgress&) override { return WarmupReport{}; }
  void start() override {}
  void stop() override {}
  bool step() override { return false; }
  bool has_unfinished() const override { return pending; }
  EngineStats stats() const override {
    EngineStats s;
    s.last_step_time_s = last_step;
    s.waiting = pending ? 1 : 0;
    return s;
  }
  const EngineConfig& config() const override { return cfg_; }

 private:
  EngineConfig cfg_;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TEST(Health, LoadingThenOkThenStalled) {
  ServeOptions o;
  o.health_stall_s = 0.5;
  Server srv(o);
  std::string r = call(srv, "GET", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  EXPECT_NE(r.find("loading"), std::string::npos);
  EXPECT_NE(r.find("Retry-After"), std::string::npos);
  srv.set_loading_phase("warm-up 3/40");  // the warm-up runs before attach: still 503, with the phase
  r = call(srv, "GET", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  EXPECT_NE(r.find("\"phase\":\"warm-up 3/40\""), std::string::npos) << r;
  // Generation while loading: 503 + Retry-After, OpenAI error body.
  r = call(srv, "POST", "/v1/completions");
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  EXPECT_NE(r.find("Retry-After"), std::string::npos);
  EXPECT_NE(r.find("\"code\":\"model_loading\""), std::string::npos) << r;

  StalledEngine eng;
  ServedModel m;
  m.engine = &eng;
  m.max_model_len = 64;
  srv.attach(std::move(m));
  eng.last_step = now_s();
  r = call(srv, "GET", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;

  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // past the stall limit since attach
  eng.last_step = now_s() - 5;  // work pending, no step for 5 s
  r = call(srv, "GET", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 503", 0), 0u) << r;
  EXPECT_NE(r.find("stalled"), std::string::npos) << r;

  eng.pending = false;  // idle engines are healthy however long ago they stepped
  r = call(srv, "GET", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;

  r = call(srv, "GET", "/metrics");
  EXPECT_NE(r.find("mopt:model_loaded{model_name=\"mopt\"} 1"), std::string::npos) << r;
  r = call(srv, "DELETE", "/health");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r;
  r = call(srv, "GET", "/nope");
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r;
}

}  // namespace
}  // namespace mopt::server
