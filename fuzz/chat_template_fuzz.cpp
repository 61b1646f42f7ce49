// libFuzzer target: a Jinja chat template's source, compiled under the server's limits and rendered
// with a fixed conversation (system prompt, tools, a tool call and its result).
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/chat_template.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::chat_template_body(data, size);
}
