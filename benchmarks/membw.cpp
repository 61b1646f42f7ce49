// Memory read bandwidth of this machine (the roofline for decode matvec): sums a large buffer with all
// threads, best of several repetitions.   bench_membw [--mib 512] [--reps 10] [--threads 0]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cpu/membw.h"
#include "core/thread_pool.h"

int main(int argc, char** argv) {
  size_t mib = 512;
  int reps = 10, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--mib N] [--reps N] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  if (mib < 1 || reps < 1) {
    std::fprintf(stderr, "--mib and --reps must be >= 1\n");
    return 2;
  }
  mopt::ThreadPool pool(threads);
  for (int t = 1; t <= pool.size(); t *= 2) {
    mopt::ThreadPool p(t);
    const double bw = mopt::cpu::measure_read_bandwidth(p, mib << 20, reps);
    std::printf("read bandwidth, %d thread(s), %zu MiB buffer: %.2f GB/s\n", t, mib, bw / 1e9);
  }
  if ((pool.size() & (pool.size() - 1)) != 0) {
    const double bw = mopt::cpu::measure_read_bandwidth(pool, mib << 20, reps);
    std::printf("read bandwidth, %d thread(s), %zu MiB buffer: %.2f GB/s\n", pool.size(), mib, bw / 1e9);
  }
  return 0;
}
