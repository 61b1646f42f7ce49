// mopt synth's checkpoint writer: what it writes loads through the ordinary Hugging Face path with exactly the
// dummy loader's weights, in shards with an index; its tokenizer makes each given word one token, gives every id
// text, and keeps the config's special ids when they fit (else rewrites them); an existing checkpoint is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "core/mmap.h"
#include "model/loaders.h"
#include "model/random_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::fails_with;

// Llama-3's special ids in a 1,000-token vocabulary.
const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 256,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "bos_token_id": 998, "eos_token_id": 999,
  "tie_word_embeddings": false})";

// Qwen2's habit: BOS = EOS = 0, which is a byte token of the synthetic vocabulary.
const char* kTinyQwen = R"({
  "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 600, "max_position_embeddings": 256,
  "rms_norm_eps": 1e-06, "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": true})";

Result<RandomCheckpoint> write(const std::string& dir, const char* config, uint64_t shard_bytes) {
  const std::string cfg = dir + "/in.json";
  FILE* f = std::fopen(cfg.c_str(), "w");
  std::fputs(config, f);
  std::fclose(f);
  RandomCheckpointOptions o;
  o.config_path = cfg;
  o.out_dir = dir + "/ckpt";
  o.max_shard_bytes = shard_bytes;
  o.words = {"the", "little", "dog", "went"};
  return write_random_checkpoint(o);
}

TEST(RandomCheckpoint, LoadsWithTheDummyWeightsInShards) {
  const std::string dir = test::scratch_dir();
  auto w = write(dir, kTinyLlama, 64 << 10);  // 64 KiB shards: the 128 KiB embedding gets one of its own
  ASSERT_TRUE(w.is_ok()) << w.message();
  EXPECT_TRUE(test::file_exists(dir + "/ckpt/model.safetensors.index.json"));
  EXPECT_FALSE(test::file_exists(dir + "/ckpt/model.safetensors"));
  auto loaded = load_model(dir + "/ckpt");
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  LoadOptions dummy_opts;
  dummy_opts.dummy = true;
  auto dummy = load_dummy_model(dir + "/in.json", dummy_opts);
  ASSERT_TRUE(dummy.is_ok()) << dummy.message();
  const Model& a = **loaded;
  const Model& b = **dummy;
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  EXPECT_EQ(static_cast<int>(a.tensors.size()), w->n_tensors);
  uint64_t bytes = 0;
  for (const TensorView& t : b.tensors) {
    const TensorView* u = nullptr;
    for (const TensorView& x : a.tensors)
      if (x.name == t.name) u = &x;
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dtype, DType::BF16);
    EXPECT_EQ(u->ne, t.ne) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0) << t.name << ": other weights than --load-format dummy";
    bytes += t.nbytes;
  }
  EXPECT_EQ(w->weight_bytes, bytes);
}

TEST(RandomCheckpoint, TokenizerWordsAreOneTokenAndEveryIdHasText) {
  const std::string dir = test::scratch_dir();
  auto w = write(dir, kTinyLlama, 1ull << 30);
  ASSERT_TRUE(w.is_ok()) << w.message();
  EXPECT_TRUE(test::file_exists(dir + "/ckpt/model.safetensors"));
  auto m = load_model(dir + "/ckpt");
  ASSERT_TRUE(m.is_ok()) << m.message();
  auto tok = Tokenizer::create((*m)->vocab);
  ASSERT_TRUE(tok.is_ok()) << tok.message();
  EXPECT_EQ((*tok)->n_vocab(), 1000);
  EXPECT_EQ((*tok)->bos(), 998);
  EXPECT_EQ((*tok)->eos(), 999);
  const std::vector<int32_t> ids = (*tok)->encode("the little dog went the dog", true, false);
  ASSERT_EQ(ids.size(), 7u);  // BOS + one token per word
  EXPECT_EQ(ids[0], 998);
  EXPECT_EQ((*tok)->decode(ids), "the little dog went the dog");
  EXPECT_EQ((*tok)->encode("cat", false, false).size(), 3u);  // not a word of the list: bytes
  for (int32_t id = 0; id < 998; ++id) EXPECT_FALSE((*tok)->piece(id).empty()) << "id " << id << " has no text";
}

TEST(RandomCheckpoint, ConfigSpecialIdsThatCannotBeSpecialAreRewritten) {
  const std::string dir = test::scratch_dir();
  auto w = write(dir, kTinyQwen, 1ull << 30);
  ASSERT_TRUE(w.is_ok()) << w.message();
  auto m = load_model(dir + "/ckpt");
  ASSERT_TRUE(m.is_ok()) << m.message();
  EXPECT_EQ((*m)->vocab.bos, 598);
  EXPECT_EQ((*m)->vocab.eos, 599);
  auto cfg = read_file(dir + "/ckpt/config.json");
  ASSERT_TRUE(cfg.is_ok());
  EXPECT_NE(cfg->find("\"eos_token_id\": 599"), std::string::npos) << *cfg;
}

TEST(RandomCheckpoint, RefusesAnExistingCheckpointAndBadInput) {
  const std::string dir = test::scratch_dir();
  ASSERT_TRUE(write(dir, kTinyLlama, 1ull << 30).is_ok());
  EXPECT_TRUE(fails_with(write(dir, kTinyLlama, 1ull << 30), "already holds a checkpoint"));
  RandomCheckpointOptions o;
  o.config_path = dir + "/missing.json";
  o.out_dir = dir + "/x";
  EXPECT_TRUE(fails_with(write_random_checkpoint(o), "missing.json"));
  o.config_path = dir + "/in.json";
  o.dtype = DType::Q4_K;
  EXPECT_TRUE(fails_with(write_random_checkpoint(o), "bf16, f16 or f32"));
}

}  // namespace
}  // namespace mopt
