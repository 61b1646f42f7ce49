// libFuzzer target: the safetensors header parser, the sharded index parser and the config.json parser.
// Build: CC=clang CXX=clang++ cmake -DMOPT_FUZZ=ON ...; run: ./safetensors_fuzz -max_total_time=120 CORPUS_DIR
#include "fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::safetensors_body(data, size);
}
