// libFuzzer target: generated text through the chat output parsers (reasoning, tool calls), streamed
// in pieces and whole, which must agree.
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/model_output.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::model_output_body(data, size);
}
