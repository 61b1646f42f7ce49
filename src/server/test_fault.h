// Test-only fault injection for `mopt gate`'s own tests (`mopt serve --test-fault KIND`, a hidden flag). Each kind
// plants one defect that exactly one production gate must catch, and nothing else:
//   leak   every generation request retains 64 KiB of touched memory that is never freed (host RSS grows);
//   slow   every 20th generation request (index 19, 39, ...) waits 4 s before it reaches the engine (the tail);
//   error  every 20th generation request (index 19, 39, ...) is answered 500 without generating (the error rate).
// The first requests after a start are never affected, so restart times stay honest. Never use it in production:
// the server logs a warning at start when a fault is armed.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/openai.h"

namespace mopt::server {

enum class TestFault { kNone, kLeak, kSlow, kError };

// "none", "leak", "slow", "error"; anything else is an error naming the accepted kinds.
Result<TestFault> parse_test_fault(const std::string& s);
const char* test_fault_name(TestFault f);

class FaultInjector {
 public:
  static constexpr uint64_t kEvery = 20;               // slow / error: one request in kEvery
  static constexpr double kSlowSeconds = 4.0;          // slow: added before the request reaches the engine
  static constexpr size_t kLeakBytes = 64 * 1024;      // leak: retained per request

  explicit FaultInjector(TestFault f = TestFault::kNone) : fault_(f) {}
  TestFault fault() const { return fault_; }
  // Called once per generation request on its HTTP thread, before it is submitted: leaks, sleeps, or returns
  // the error the request must be answered with.
  std::optional<ApiError> before_request();

 private:
  TestFault fault_;
  std::atomic<uint64_t> seen_{0};
  std::mutex leak_mu_;
  std::vector<std::vector<char>> leaked_;  // reachable on purpose: LeakSanitizer must not flag a planted fault
};

}  // namespace mopt::server
