// The tokenizers against independent references: llama.cpp's vocab test vectors (ids Hugging Face gives),
// the code-qwen2-25m outputs of transformers, and llama2.c's tok512.bin against the GGUF vocab of the same model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/unicode.h"

namespace mopt {
namespace {

using test::ids_str;
using test::models_dir;

std::unique_ptr<Tokenizer> make(const Result<VocabData>& v) {
  EXPECT_TRUE(v.is_ok()) << v.message();
  if (!v.is_ok()) return nullptr;
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::create(*v);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

// Streams ids one at a time; checks every chunk is whole UTF-8 and the concatenation equals decode().
void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool render_special = false) {
  StreamDecoder sd(tok, render_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = sd.push(id);
    ASSERT_TRUE(uni::is_valid_utf8(chunk)) << "chunk after id " << id << " splits a UTF-8 character";
    streamed += chunk;
  }
  const std::string tail = sd.flush();
  ASSERT_TRUE(uni::is_valid_utf8(tail));
  streamed += tail;
  EXPECT_EQ(streamed, tok.decode(ids, render_special)) << "ids:" << ids_str(ids);
}

struct Family {
  const char* name;
  bool lossless;  // decode(encode(x)) == x
};

class VocabVectors : public ::testing::TestWithParam<Family> {};

TEST_P(VocabVectors, MatchesHuggingFaceIds) {
  const std::string base = models_dir() + "/llama.cpp-vocab/ggml-vocab-" + GetParam().name + ".gguf";
  auto tok = make(test::load_gguf_vocab(base));
  ASSERT_TRUE(tok);
  const auto inputs = test::read_inp(base + ".inp");
  const auto expected = test::read_out(base + ".out");
  ASSERT_EQ(inputs.size(), 46u) << base << ".inp";
  ASSERT_EQ(expected.size(), inputs.size()) << base << ".out";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids_str(ids), ids_str(expected[i])) << "string " << i << ": \"" << inputs[i] << "\"";
    if (GetParam().lossless) {
      EXPECT_EQ(tok->decode(ids), inputs[i]) << "round trip of string " << i;
    }
    check_stream(*tok, ids);
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, VocabVectors,
                         ::testing::Values(Family{"llama-spm", true}, Family{"phi-3", true}, Family{"gpt-2", true},
                                           Family{"deepseek-llm", true}, Family{"starcoder", true},
                                           Family{"bert-bge", false}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

// Vocabs without vectors still load and tokenize losslessly.
TEST(VocabVectors, BaichuanAndNeoxLoad) {
  for (const char* name : {"baichuan", "gpt-neox"}) {
    auto tok = make(test::load_gguf_vocab(models_dir() + "/llama.cpp-vocab/ggml-vocab-" + name + ".gguf"));
    ASSERT_TRUE(tok) << name;
    const std::string text = "Hello world, 3333 times! \xF0\x9F\xA6\x99";
    EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text) << name;
  }
}

class QwenTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = make(vocab_from_hf_dir(models_dir() + "/code-qwen2-25m"));
    ASSERT_TRUE(tok_);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(QwenTokenizer, VocabFromHfDir) {
  const VocabData& v = tok_->vocab();
  EXPECT_EQ(v.kind, TokenizerKind::kBpe);
  EXPECT_EQ(v.pre, "qwen2");
  EXPECT_EQ(v.tokens.size(), 4096u);
  EXPECT_EQ(v.eos, 0);
  EXPECT_FALSE(v.add_bos);
  EXPECT_TRUE(tok_->is_control(0) && tok_->is_control(1) && tok_->is_control(2));
  EXPECT_TRUE(tok_->is_eog(0));  // <|endoftext|>
  EXPECT_TRUE(tok_->is_eog(2));  // <|im_end|>
  EXPECT_FALSE(tok_->is_eog(1));
}

TEST_F(QwenTokenizer, MatchesTransformersIds) {
  const auto inputs = test::read_inp(models_dir() + "/llama.cpp-vocab/ggml-vocab-gpt-2.gguf.inp");
  const auto expected = test::read_out(models_dir() + "/code-qwen2-25m.tokenizer.out");
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok_->encode(inputs[i], false, false);
    EXPECT_EQ(ids_str(ids), ids_str(expected[i])) << "string " << i << ": \"" << inputs[i] << "\"";
    EXPECT_EQ(tok_->decode(ids), inputs[i]);
    check_stream(*tok_, ids);
  }
}

TEST_F(QwenTokenizer, ReferencePromptsAndGreedyText) {
  const std::string ref = test::read_text(models_dir() + "/code-qwen2-25m.reference.json");
  ASSERT_FALSE(ref.empty());
  const auto j = nlohmann::json::parse(ref);
  ASSERT_EQ(j["greedy"].size(), 4u);
  for (const auto& g : j["greedy"]) {
    const std::string prompt = g["prompt"].get<std::string>();
    const auto want = g["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids_str(tok_->encode(prompt, true, false)), ids_str(want)) << prompt;
    const auto gen = g["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->decode(gen), g["greedy_text"].get<std::string>());
    check_stream(*tok_, gen);
  }
}

TEST_F(QwenTokenizer, SpecialTokenText) {
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const auto parsed = tok_->encode(text, false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 1), 1);
  // Without parse_special the same text is plain text: no control ids, and it decodes back.
  const auto plain = tok_->encode(text, false, false);
  for (int32_t id : plain) EXPECT_FALSE(tok_->is_control(id));
  EXPECT_EQ(tok_->decode(plain), text);
  // Control tokens are omitted from decode unless rendered.
  EXPECT_EQ(tok_->decode(parsed), "user\nhi");
  EXPECT_EQ(tok_->decode(parsed, true), text);
  check_stream(*tok_, parsed, true);
}

// tok512.bin (llama2.c) and stories260K.gguf carry the same SentencePiece vocab.
TEST(Llama2c, Tok512MatchesGgufVocab) {
  Result<VocabData> bin = vocab_from_llama2c(models_dir() + "/tok512.bin");
  ASSERT_TRUE(bin.is_ok()) << bin.message();
  Result<VocabData> gg = test::load_gguf_vocab(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(gg.is_ok()) << gg.message();
  ASSERT_EQ(bin->tokens.size(), 512u);
  EXPECT_EQ(bin->tokens, gg->tokens);
  EXPECT_EQ(bin->scores, gg->scores);
  EXPECT_EQ(bin->types, gg->types);
  EXPECT_EQ(bin->bos, 1);
  EXPECT_EQ(bin->eos, 2);
  auto a = make(bin);
  auto b = make(gg);
  ASSERT_TRUE(a && b);
  const auto inputs = test::read_inp(models_dir() + "/llama.cpp-vocab/ggml-vocab-llama-spm.gguf.inp");
  std::vector<std::string> texts(inputs.begin(), inputs.end());
  texts.push_back("Once upon a time, there was a little girl named Lily.");
  for (const std::string& t : texts) {
    const auto ids = a->encode(t, true, false);
    EXPECT_EQ(ids_str(ids), ids_str(b->encode(t, true, false))) << t;
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(a->decode(ids), t);
    EXPECT_EQ(a->decode(ids), b->decode(ids));
    check_stream(*a, ids);
  }
  // Known ids (llama2.c vocab: 259 " t"... per the file's own listing order).
  EXPECT_EQ(a->token_id("\xE2\x96\x81t"), 259);
}

}  // namespace
}  // namespace mopt
