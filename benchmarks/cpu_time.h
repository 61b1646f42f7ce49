// CPU time of the benchmark process, shared by the benchmark programs.
#pragma once

#include <time.h>

namespace mopt::bench {

// CPU seconds of this process (all threads). On a shared machine, figures per CPU-second are the ones least
// disturbed by other load.
inline double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace mopt::bench
