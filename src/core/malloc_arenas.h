// The server's C heap: one glibc malloc arena for all threads, unless the environment chose a number.
//
// glibc gives threads arenas of their own (up to 8 per core), and an arena's free memory serves only the threads on
// it. Under a steady load the server's HTTP threads and engine thread allocate what the others free, and the heaps of
// the thread arenas grew by a page every few seconds long after the warm-up while the bytes in use stayed flat: the
// leak gate's slope of resident memory (docs/gate.md has the figures). With one arena every free chunk serves every
// thread and the resident heap stayed flat. Small allocations still go through each thread's cache (tcache),
// without the arena's lock.
#pragma once

#include <string>

namespace mopt {

// Limits the process to `arenas` malloc arenas. Call it first thing: threads that already have arenas keep them, and
// glibc fixes its limit for good once a process has more than 8. Left alone when MALLOC_ARENA_MAX or a
// glibc.malloc.arena_max tunable is set, or without glibc. Returns what was done, for the log.
std::string bound_malloc_arenas(int arenas);

// The malloc arenas the process has now (glibc's malloc_info), or -1 where that cannot be read.
int malloc_arenas_in_use();

}  // namespace mopt
