#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <stdio.h>
#include <stdlib.h>

#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include "core/malloc_arenas.h"
#include "unit/sanitized.h"

namespace mopt {
namespace {

// ASan and TSan replace malloc: glibc's arenas are not the allocator then, and there is nothing to count.
constexpr const char* kMallocReplaced = "a sanitizer replaces malloc in this build: glibc's arenas are not in use";

// Four threads that are alive together, each allocating: a thread without an arena gets a new one while the process
// is under its limit (8 per core by default), so the count tells whether the limit holds.
int arenas_after_four_threads() {
  std::barrier all(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      std::vector<std::string> v(64, std::string(200, 'x'));  // heap allocations on this thread
      all.arrive_and_wait();                                  // none ends before all have allocated
    });
  for (auto& t : ts) t.join();
  return malloc_arenas_in_use();
}

// In a fresh process ("threadsafe" death tests run the binary again for this test alone), so the arenas of the other
// tests' threads do not count: glibc fixes its limit for good once a process has more than 8 arenas.
TEST(MallocArenasDeathTest, OneArenaServesNewThreads) {
  if (test::kSanitized) GTEST_SKIP() << kMallocReplaced;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  unsetenv("MALLOC_ARENA_MAX");
  EXPECT_EXIT(
      {
        const int before = malloc_arenas_in_use();
        const std::string what = bound_malloc_arenas(1);
        const int after = arenas_after_four_threads();
        fprintf(stderr, "%s; arenas %d -> %d\n", what.c_str(), before, after);
        exit(what == "malloc arenas: 1 (MALLOC_ARENA_MAX overrides)" && after == before ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "arenas");
}

TEST(MallocArenasDeathTest, WithoutTheBoundThreadsGetArenasOfTheirOwn) {  // the control: the count does move
  if (test::kSanitized) GTEST_SKIP() << kMallocReplaced;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const int before = malloc_arenas_in_use();
        const int after = arenas_after_four_threads();
        fprintf(stderr, "arenas %d -> %d\n", before, after);
        exit(after >= before + 4 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "arenas");
}

TEST(MallocArenas, CountsTheMainArena) { EXPECT_GE(malloc_arenas_in_use(), 1); }

TEST(MallocArenas, TheEnvironmentWins) {
  setenv("MALLOC_ARENA_MAX", "4", 1);
  EXPECT_EQ(bound_malloc_arenas(1), "malloc arenas: MALLOC_ARENA_MAX=4 (from the environment)");
  unsetenv("MALLOC_ARENA_MAX");
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2", 1);
  EXPECT_EQ(bound_malloc_arenas(1), "malloc arenas: glibc.malloc.arena_max (from GLIBC_TUNABLES)");
  unsetenv("GLIBC_TUNABLES");
  EXPECT_EQ(bound_malloc_arenas(0), "malloc arenas: glibc's default");
}

}  // namespace
}  // namespace mopt
#endif
