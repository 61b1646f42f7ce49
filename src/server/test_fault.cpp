#include "server/test_fault.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace mopt::server {

Result<TestFault> parse_test_fault(const std::string& s) {
  if (s == "none" || s.empty()) return TestFault::kNone;
  if (s == "leak") return TestFault::kLeak;
  if (s == "slow") return TestFault::kSlow;
  if (s == "error") return TestFault::kError;
  return error("--test-fault '%s': expected none, leak, slow or error (a test-only switch)", s.c_str());
}

const char* test_fault_name(TestFault f) {
  switch (f) {
    case TestFault::kNone: return "none";
    case TestFault::kLeak: return "leak";
    case TestFault::kSlow: return "slow";
    case TestFault::kError: return "error";
  }
  return "?";
}

std::optional<ApiError> FaultInjector::before_request() {
  if (fault_ == TestFault::kNone) return std::nullopt;
  const uint64_t i = seen_.fetch_add(1);
  const bool hit = i % kEvery == kEvery - 1;
  switch (fault_) {
    case TestFault::kLeak: {
      std::vector<char> block(kLeakBytes);
      std::memset(block.data(), static_cast<int>(i & 0x7f) | 1, block.size());  // touched: resident
      std::lock_guard<std::mutex> lk(leak_mu_);
      leaked_.push_back(std::move(block));
      return std::nullopt;
    }
    case TestFault::kSlow:
      if (hit) std::this_thread::sleep_for(std::chrono::duration<double>(kSlowSeconds));
      return std::nullopt;
    case TestFault::kError:
      if (hit) return api_error(500, "injected failure (mopt serve --test-fault error, a test-only switch)",
                                "test_fault");
      return std::nullopt;
    case TestFault::kNone: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace mopt::server
