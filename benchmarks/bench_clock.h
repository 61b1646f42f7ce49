// The benchmarks' wall clock and the median they report.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace mopt::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The upper median of v (0 for none).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace mopt::bench
