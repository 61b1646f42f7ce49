// Runs the loader fuzz bodies (fuzz/fuzz_bodies.h) over a deterministic corpus of mutated files, so the
// regular test build (and CI's ASan/UBSan run) exercises what the libFuzzer targets do. Mutations: bit flips,
// interesting values written over 1/4/8-byte fields, truncation, chunk deletion and duplication.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../../../fuzz/fuzz_bodies.h"
#include "core/mmap.h"
#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  std::vector<uint8_t> mutate(const std::vector<uint8_t>& in) {
    std::vector<uint8_t> b = in;
    const int n_ops = 1 + static_cast<int>(rng_() % 3);
    for (int op = 0; op < n_ops; ++op) {
      if (b.empty()) break;
      const size_t pos = rng_() % b.size();
      switch (rng_() % 7) {
        case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng_() % 8)); break;
        case 1: b[pos] = kBytes[rng_() % std::size(kBytes)]; break;
        case 2: put(b, pos, static_cast<uint32_t>(kWords[rng_() % std::size(kWords)])); break;
        case 3: put(b, pos, kWords[rng_() % std::size(kWords)]); break;
        case 4: b.resize(pos); break;
        case 5: {
          size_t len = std::min<size_t>(b.size() - pos, 1 + rng_() % 64);
          b.erase(b.begin() + static_cast<ptrdiff_t>(pos), b.begin() + static_cast<ptrdiff_t>(pos + len));
          break;
        }
        default: {
          size_t len = std::min<size_t>(b.size() - pos, 1 + rng_() % 64);
          std::vector<uint8_t> chunk(b.begin() + static_cast<ptrdiff_t>(pos),
                                     b.begin() + static_cast<ptrdiff_t>(pos + len));
          b.insert(b.begin() + static_cast<ptrdiff_t>(rng_() % b.size()), chunk.begin(), chunk.end());
        }
      }
    }
    return b;
  }

 private:
  template <class T>
  static void put(std::vector<uint8_t>& b, size_t pos, T v) {
    if (pos + sizeof(T) <= b.size()) std::memcpy(b.data() + pos, &v, sizeof(T));
  }
  static constexpr uint8_t kBytes[] = {0, 1, 0x7f, 0x80, 0xff, '{', '"', ']', '9'};
  static constexpr uint64_t kWords[] = {0, 1, 2, 4, 5, 8, 9, 12, 13, 30, 31, 32, 33, 255, 256, 0x7fffffff, 0xffffffff,
                                        1ull << 32, 1ull << 40, 1ull << 62, 1ull << 63, ~0ull, ~0ull - 7};
  std::mt19937_64 rng_;
};

// Replays `n` mutants of each seed through `body`, each in an exact-size heap buffer (so ASan sees overreads).
template <class Body>
void replay(const std::vector<std::vector<uint8_t>>& seeds, int n, uint64_t seed, Body body) {
  Mutator mut(seed);
  for (const auto& s : seeds) {
    std::vector<uint8_t> copy = s;
    body(copy.data(), copy.size());
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> m = mut.mutate(s);
      std::unique_ptr<uint8_t[]> exact(new uint8_t[m.size() ? m.size() : 1]);
      if (!m.empty()) std::memcpy(exact.get(), m.data(), m.size());
      body(exact.get(), m.size());
    }
  }
}

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

std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

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
