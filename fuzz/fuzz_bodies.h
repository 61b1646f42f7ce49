// Bodies of the loader fuzz targets, shared by the libFuzzer entry points (fuzz/*_fuzz.cpp) and by the
// unit test that replays a corpus of mutated files under the regular (ASan/UBSan) test build
// (tests/unit/model/fuzz_corpus_test.cpp). Each body must never crash, whatever the bytes; it touches
// every byte a successful parse hands out so out-of-bounds views are caught by the sanitizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/arch.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/safetensors.h"

namespace mopt::fuzz {

// Reads every byte of a view (the sum keeps the reads from being optimized away).
inline uint64_t touch(const void* data, uint64_t n) {
  const volatile uint8_t* p = static_cast<const volatile uint8_t*>(data);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

inline int gguf_body(const uint8_t* data, size_t size) {
  auto f = gguf::File::open_memory(data, size, "fuzz.gguf");
  if (!f) return 0;
  uint64_t sum = 0;
  for (const auto& [k, v] : (*f)->metadata()) sum += k.size() + v.to_string(4).size();
  for (const auto& t : (*f)->tensors()) sum += touch(t.view.data, t.view.nbytes);
  (void)(*f)->get_string_array("tokenizer.ggml.tokens");
  (void)(*f)->get_float_array("tokenizer.ggml.scores");
  (void)(*f)->get_int_array("tokenizer.ggml.token_type");
  auto c = config_from_gguf(**f);
  if (c) (void)validate_config(*c);
  return static_cast<int>(sum & 0);
}

inline int safetensors_body(const uint8_t* data, size_t size) {
  auto t = safetensors::parse(data, size, "fuzz.safetensors");
  uint64_t sum = 0;
  if (t)
    for (const auto& v : *t) sum += touch(v.data, v.nbytes);
  // The same bytes as JSON text: the sharded index and config.json parsers.
  const std::string text = size ? std::string(reinterpret_cast<const char*>(data), size) : std::string();
  (void)safetensors::parse_index(text, "fuzz.index.json");
  (void)parse_hf_config(text, "fuzz.config.json");
  return static_cast<int>(sum & 0);
}

}  // namespace mopt::fuzz
