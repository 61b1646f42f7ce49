// libFuzzer target: the GGUF reader (header, metadata, tensor table) and GGUF config extraction.
// Build: CC=clang CXX=clang++ cmake -DMOPT_FUZZ=ON ...; run: ./gguf_fuzz -max_total_time=120 CORPUS_DIR
#include "fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return mopt::fuzz::gguf_body(data, size); }
