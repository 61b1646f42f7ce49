// libFuzzer target: regular expressions (guided_regex, JSON Schema 'pattern') to GBNF, compiled and walked.
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/regex.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::regex_body(data, size);
}
