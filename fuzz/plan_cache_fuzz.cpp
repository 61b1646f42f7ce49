// libFuzzer target: the persistent plan cache's parser (backend/plan_cache.h).
// Build: CC=clang CXX=clang++ cmake -DMOPT_FUZZ=ON ...;
// run: ./plan_cache_fuzz -max_total_time=120 WORK_DIR fuzz/corpus/plan_cache
#include "plan_cache_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::plan_cache_body(data, size);
}
