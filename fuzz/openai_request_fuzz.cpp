// libFuzzer target: an OpenAI request body through parse_json_body, parse_generate_request (chat and
// completions), the chat template and request_grammar (structured output, tools), stopping short of the engine.
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/openai_request.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::openai_request_body(data, size);
}
