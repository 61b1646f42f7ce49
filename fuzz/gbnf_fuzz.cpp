// libFuzzer target: GBNF grammar text (the request's 'grammar' / guided_grammar): parse, print, reparse, compile, walk.
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/gbnf.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::gbnf_body(data, size);
}
