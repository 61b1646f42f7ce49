// Parallel loops on threads started for the one loop and joined before it returns: for work done once (reading
// and repacking a model's weights, filling random ones) where a ThreadPool would outlive its use. The caller is
// always one of the threads. Calls may nest (a loop body may start its own loop); each level starts its own
// threads, so callers keep their caps small.
#pragma once

#include <cstdint>
#include <functional>

namespace mopt {

// The threads a loop may use: hardware_concurrency, at least 1, at most `cap` (and at most 1 when cap < 1).
int worker_count(int64_t cap);

// fn(t) for every t in [0, n_threads): t = 0 on the calling thread, the others on new threads; returns when all are
// done. n_threads < 1 runs fn(0) alone.
void on_threads(int n_threads, const std::function<void(int t)>& fn);

// fn(i0, i1) over [0, n) in n_threads contiguous ranges [n t / k, n (t + 1) / k) (k = min(n_threads, n)), one per
// thread; the calling thread takes the first.
void split_range(int64_t n, int n_threads, const std::function<void(int64_t i0, int64_t i1)>& fn);

// fn(i) for every item in [0, n), each thread taking the next unclaimed item until none is left (items of uneven
// cost). No order between items; results must not depend on which thread runs one.
void for_each_item(int64_t n, int n_threads, const std::function<void(int64_t i)>& fn);

}  // namespace mopt
