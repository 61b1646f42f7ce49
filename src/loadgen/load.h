// The load generator: a single-threaded epoll HTTP/1.1 client with keep-alive connections that drives an
// OpenAI-compatible streaming endpoint in closed-loop (fixed concurrency) or open-loop (Poisson / gamma
// arrivals at a rate, optionally capped by --max-concurrency) mode and records every request.
//
// Timing: every timestamp is CLOCK_MONOTONIC, taken right after the recv() that delivered the bytes. A
// request's clock starts just before its bytes are handed to send(). TTFT = first SSE event with non-empty
// text; each later such event adds an inter-token gap (ITL); E2E ends at "data: [DONE]" (or the end of the body).
// Several events arriving in one recv() share a timestamp (the client saw them at the same time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loadgen/workload.h"
#include "core/status.h"

namespace mopt::loadgen {

struct Target {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string path = "/v1/completions";  // request path
  bool chat = false;                      // chat/completions body (messages) instead of completions (prompt)
  std::string model;
  std::string api_key;                    // sent as "Authorization: Bearer <key>" when set
  bool ignore_eos = false;                // adds "ignore_eos": true (vLLM / mopt extension)
  std::string extra_body;                 // JSON object merged into every request body
  double timeout_s = 600;                 // per request
};

struct LoadSpec {
  enum class Mode { kConcurrency, kRate };
  Mode mode = Mode::kConcurrency;
  int concurrency = 1;        // kConcurrency: requests in flight
  double rate = 0;            // kRate: requests/s (infinity: all at t=0)
  double burstiness = 1;      // gamma shape of inter-arrival times; 1 = Poisson, < 1 burstier
  int max_concurrency = 0;    // kRate: cap on requests in flight (0 = none); later arrivals queue
  int64_t num_requests = 0;   // stop issuing after this many (0: use duration_s)
  double duration_s = 0;      // stop issuing after this long
  uint64_t seed = 1;
  std::string label() const;  // "concurrency=8", "rate=20/s"
  double load_value() const;  // the swept quantity (concurrency or rate)
};

enum class ErrorKind { kNone, kConnect, kTimeout, kHttpStatus, kProtocol, kServerError, kClosed, kNoTokens };
const char* error_kind_name(ErrorKind k);

struct RequestRecord {
  int64_t index = 0;
  double scheduled_s = 0;   // intended start (open loop), seconds from phase start
  double start_s = 0;       // actual start
  double ttft_s = -1;       // -1: no token
  double e2e_s = -1;
  std::vector<double> itl_s;        // [output chunks - 1] gaps between content events
  int expected_prompt_tokens = 0;   // workload's estimate
  int max_tokens = 0;
  int usage_prompt_tokens = -1;     // from the usage chunk (-1: not reported)
  int usage_completion_tokens = -1;
  int content_events = 0;           // SSE events with non-empty text (counted tokens)
  int http_status = 0;
  ErrorKind error = ErrorKind::kNone;
  std::string error_message;
  std::string response_id;

  bool ok() const { return error == ErrorKind::kNone; }
  int output_tokens() const { return usage_completion_tokens >= 0 ? usage_completion_tokens : content_events; }
  int prompt_tokens() const { return usage_prompt_tokens >= 0 ? usage_prompt_tokens : expected_prompt_tokens; }
  // (e2e - ttft) / (output tokens - 1); -1 when fewer than 2 tokens.
  double tpot_s() const;
};

struct LiveStats {
  double elapsed_s = 0;
  int64_t issued = 0, completed = 0, failed = 0, in_flight = 0, queued = 0;
  int64_t output_tokens = 0;
  int64_t target_requests = 0;  // 0 when duration-bound
  double target_duration_s = 0;
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  double wall_s = 0;            // first issue to last completion
  int64_t not_started = 0;      // arrivals still queued when the duration ended
  std::vector<double> client_lag_s;  // now - mopt_sent_ns, when the server echoes send times
  bool stopped_early = false;   // a RecordFn asked to stop issuing
};

using ProgressFn = std::function<void(const LiveStats&)>;
// Called on the load thread with each request's record when it finishes (succeeded or failed). Returning true
// stops the phase early: no new request is issued, requests in flight finish, queued arrivals count as not
// started (e.g. `mopt tune` drops a candidate once its SLA can no longer be met).
using RecordFn = std::function<bool(const RequestRecord&)>;
// Runs one load phase to completion (all issued requests finished or timed out).
Result<PhaseResult> run_phase(const Target& target, Workload& workload, const LoadSpec& spec,
                              const ProgressFn& progress = nullptr, const RecordFn& on_record = nullptr);

// Builds the JSON request body for one work item (exposed for tests).
std::string build_request_body(const Target& target, const WorkItem& item);

}  // namespace mopt::loadgen
