// libFuzzer target: a JSON Schema (response_format json_schema, guided_json, tool parameters) to GBNF,
// compiled against a small vocabulary and walked.
// Build and run: docs/testing.md ("Fuzzing what a request reaches"); seeds in fuzz/corpus/json_schema.
#include "request_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return mopt::fuzz::json_schema_body(data, size);
}
