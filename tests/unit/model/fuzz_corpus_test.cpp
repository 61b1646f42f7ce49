// Runs the loader fuzz bodies (fuzz/fuzz_bodies.h) over a deterministic corpus of mutated files, so the
// regular test build (and CI's ASan/UBSan run) exercises what the libFuzzer targets do. Mutations: bit flips,
// interesting values written over 1/4/8-byte fields, truncation, chunk deletion and duplication.
#include <gtest/gtest.h>

#include <cstring>

#include "../../../fuzz/fuzz_bodies.h"
#include "core/mmap.h"
#include "unit/fuzz_replay.h"
#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::replay;
using test::to_bytes;

std::vector<uint8_t> small_gguf() {
  test::GgufWriter w;
  w.kv_str("general.architecture", "llama");
  for (const char* k : {"embedding_length", "feed_forward_length", "block_count", "attention.head_count"})
    w.kv_u32(std::string("llama.") + k, 1);
  w.kv_f32("llama.rope.freq_base", 10000.0f);
  w.kv_str_array("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.kv_f32_array("tokenizer.ggml.scores", {0.5f, 1.0f, 2.0f});
  w.kv_i32_array("tokenizer.ggml.token_type", {1, 1, 3});
  w.kv_u32("general.alignment", 32);
  w.tensor("token_embd.weight", test::kF16, {8, 3});
  w.tensor("blk.0.attn_q.weight", test::kQ8_0, {32, 2});
  w.tensor("blk.0.ffn_up.weight", test::kQ4_K, {256});
  w.tensor("output_norm.weight", test::kF32, {8});
  return w.build();
}

TEST(FuzzCorpus, GgufMutants) {
  std::vector<std::vector<uint8_t>> seeds = {small_gguf()};
  replay(seeds, 3000, 1, fuzz::gguf_body);
  // The real stories260K.gguf (1.1 MB): fewer mutants.
  auto real = read_file(test::model_path("stories260K.gguf"));
  ASSERT_TRUE(real.is_ok()) << real.message();
  replay({std::vector<uint8_t>(real->begin(), real->end())}, 100, 2, fuzz::gguf_body);
}

TEST(FuzzCorpus, SafetensorsAndJsonMutants) {
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                       R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}})";
  std::vector<uint8_t> st(8);
  uint64_t n = header.size();
  std::memcpy(st.data(), &n, 8);
  st.insert(st.end(), header.begin(), header.end());
  st.resize(st.size() + 24, 0x3f);
  auto config = read_file(test::model_path("code-qwen2-25m/config.json"));
  auto index = read_file(test::model_path("code-qwen2-25m/model.safetensors.index.json"));
  ASSERT_TRUE(config.is_ok() && index.is_ok());
  replay({st, to_bytes(*config), to_bytes(*index)}, 1500, 3, fuzz::safetensors_body);
}

}  // namespace
}  // namespace mopt
