// Memory read bandwidth probe: the roofline for memory-bound matvec (decode).
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace mopt::cpu {

// Sums a `bytes`-byte buffer (allocated and touched once) with all pool threads, `reps` times, each thread's share
// read as 1, 2 and 4 interleaved streams in turn; returns the best bytes/s read.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps);

}  // namespace mopt::cpu
