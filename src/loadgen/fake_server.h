// A fake OpenAI-compatible streaming server with injected, seeded delays: the test instrument that mopt bench's
// accuracy and overhead are measured against. Single-threaded epoll loop (+ timerfd for sub-ms timing) on its
// own thread; HTTP/1.1 keep-alive; chunked SSE responses.
//
//   POST /v1/completions, /v1/chat/completions   stream (SSE) or not; honours max_tokens and
//                                                stream_options.include_usage
//   GET  /health, /v1/models                     200 "ok"; a list with the one model "fake"
//   GET  /metrics                                Prometheus text: mopt:prompt_tokens_total,
//                                                mopt:generation_tokens_total, mopt:num_requests_running, ...
//
// Per request k (in arrival order) the delays come from an Rng seeded with (seed, k): the first token is sent
// `ttft` after the request was parsed (plus queueing when max_running is reached), each later token `itl` after
// the previous one (+ itl_per_running * streams running, to mimic a batching server).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loadgen/stats.h"
#include "core/status.h"

namespace mopt::loadgen {

struct FakeServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port (read it back with port())
  Distribution ttft = Distribution::fixed(0);
  Distribution itl = Distribution::fixed(0);
  int default_max_tokens = 16;    // when the request has no max_tokens
  uint64_t seed = 1;
  double error_rate = 0;          // fraction of requests answered with HTTP 500
  bool echo_timestamps = false;   // each chunk carries "mopt_sent_ns": the server's now_ns() at send time
  int max_running = 0;            // > 0: at most this many streams run at once; the others wait in a queue
  double itl_per_running_s = 0;   // each token gap grows by this many seconds per running stream
  bool record = true;             // keep the injected delays (for tests), by request id
};

struct InjectedRequest {
  std::string id;                 // the "id" field of every chunk ("cmpl-fake-<k>")
  double queue_s = 0;             // time spent waiting for a slot (max_running)
  double ttft_s = 0;              // injected first-token delay
  std::vector<double> itl_s;      // [completion_tokens - 1] injected gaps
  // What was actually delivered (the loop may wake late on a busy machine): first-token send time after the
  // request was parsed, and the gaps between the actual send times.
  double sent_ttft_s = 0;
  std::vector<double> sent_itl_s;  // [completion_tokens - 1]
  int prompt_tokens = 0, completion_tokens = 0;
  bool failed = false;            // answered with an injected 500
};

class FakeServer {
 public:
  static Result<std::unique_ptr<FakeServer>> start(const FakeServerOptions& opts);
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  int port() const { return port_; }
  void stop();
  // Copies of what was injected so far, in request order.
  std::vector<InjectedRequest> injected() const;
  uint64_t requests_served() const { return served_.load(); }

  struct Impl;

 private:
  FakeServer() = default;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<uint64_t> served_{0};
};

}  // namespace mopt::loadgen
