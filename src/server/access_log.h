// The access log: one line per HTTP request (vLLM logs each request too; --disable-log-requests turns it off).
//
//   access 127.0.0.1 "POST /v1/completions" 200 0.153s id=cmpl-5f0e... prompt_tokens=5 completion_tokens=16
//          ttft=0.021s finish=length
//
// Status 499 (as nginx writes it) means the client went away before the response was complete. The fields after
// the duration are written for generation requests only. An error the HTTP layer answers before routing (400, 408,
// 411, 413, 431, 505: the request never became one) has its own line:
//
//   access 127.0.0.1 - 413 error="request body is 8388608 bytes; the limit is 4194304"
#pragma once

#include <string>

#include "server/http.h"

namespace mopt::server {

// What a generation request adds to its access-log line; the HTTP layer fills method, path, status and duration.
struct AccessRecord {
  std::string id;              // the response id ("" when the request failed before one was made)
  int prompt_tokens = -1;      // summed over prompts (-1: not known)
  int completion_tokens = -1;  // summed over choices
  double ttft_s = -1;          // arrival to the first token the HTTP thread received (-1: none)
  std::string finish;          // finish reason of the first choice ("" when none finished)
  bool client_gone = false;    // the client disconnected before the response was complete
};

// The line (no trailing newline). `status`: what was sent (0: nothing); `duration_s`: arrival to the last byte.
// The path is written as the client sent it, with control characters and quotes escaped.
std::string access_log_line(const HttpRequest& req, int status, double duration_s, const AccessRecord& rec);
// The line of an error the HTTP layer answered itself (server/http.h, HttpErrorLog).
std::string access_error_line(const std::string& remote, int status, const std::string& message);

}  // namespace mopt::server
