// UTF-8 handling and streaming detokenization: U+FFFD by maximal subparts (Unicode 3.9, Table 3-8), the
// StreamDecoder never splitting a character and always agreeing with decode(), byte-token edge cases,
// and garbage input (random bytes, random ids) never crashing any tokenizer.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "test_util.h"
#include "tokenizer/unicode.h"

namespace mopt {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, MaximalSubpartReplacement) {
  // The example of Unicode 15 section 3.9 (Table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(uni::sanitize(in), "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_EQ(uni::sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);      // surrogate: ED then A0 is out of range
  EXPECT_EQ(uni::sanitize("\xC0\xAF"), kFffd + kFffd);                  // overlong
  EXPECT_EQ(uni::sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(uni::sanitize("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  size_t tail = 0;
  EXPECT_EQ(uni::sanitize("ab\xF0\x9F\xA6", true, &tail), "ab");
  EXPECT_EQ(tail, 3u);
  EXPECT_EQ(uni::sanitize("ab\xF0\x9F\xA6"), "ab" + kFffd);
  EXPECT_TRUE(uni::is_valid_utf8("\xF0\x9F\xA6\x99"));
  EXPECT_FALSE(uni::is_valid_utf8("\xF0\x9F\xA6"));
}

TEST(Utf8, ByteLevelMapIsGpt2s) {
  // bytes_to_unicode(): printable bytes map to themselves, the rest to 256+ in order (space -> U+0120 'Ġ').
  EXPECT_EQ(uni::byte_to_cp('!'), 33u);
  EXPECT_EQ(uni::byte_to_cp(0), 256u);
  EXPECT_EQ(uni::byte_to_cp(' '), 0x120u);
  EXPECT_EQ(uni::byte_to_cp('\n'), 0x10Au);
  EXPECT_EQ(uni::byte_to_cp(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(uni::cp_to_byte(uni::byte_to_cp(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(uni::cp_to_byte('A' + 0x1000), -1);
}

TEST(Utf8, BertCharacterClasses) {
  std::string s;
  uni::append_strip_accents(s, 0xE9);  // é -> e
  uni::append_strip_accents(s, 0x1EC7);  // ệ -> e
  uni::append_strip_accents(s, 0x301);   // combining acute: removed
  uni::append_lower(s, 0x130);           // İ -> i + U+0307
  uni::append_lower(s, 'Q');
  EXPECT_EQ(s, "eei\xCC\x87q");
  EXPECT_TRUE(uni::is_punctuation(0x3002));  // 。
  EXPECT_FALSE(uni::is_punctuation('$'));    // Sc, not P (BERT adds ASCII symbols itself)
  EXPECT_TRUE(uni::is_other(0x200D));        // ZWJ (Cf)
  EXPECT_TRUE(uni::is_cjk(0x6211));
  std::string h;
  uni::append_strip_accents(h, 0xD55C);  // 한 -> jamo
  EXPECT_EQ(h, "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  Result<VocabData> v = test::load_gguf_vocab(test::models_dir() + "/llama.cpp-vocab/ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(v.is_ok()) << v.message();
  if (!v) return nullptr;
  auto t = Tokenizer::create(*v);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t ? std::move(t).value() : nullptr;
}

TEST(StreamDecoder, HoldsSplitCharacters) {
  auto tok = load("llama-spm");
  ASSERT_TRUE(tok);
  // The llama vocab has no token for the llama emoji: it encodes as four byte tokens.
  const std::string llama = "\xF0\x9F\xA6\x99";
  const auto ids = tok->encode(llama, false, false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" + 4 bytes
  StreamDecoder sd(*tok);
  EXPECT_EQ(sd.push(ids[0]), "");  // the leading space of the first piece is dropped
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "");
  EXPECT_EQ(sd.push(ids[3]), "");
  EXPECT_EQ(sd.push(ids[4]), llama);
  EXPECT_EQ(sd.flush(), "");
  // An invalid byte becomes U+FFFD at once; an incomplete sequence becomes U+FFFD at flush().
  const int32_t ff = tok->token_id("<0xFF>"), f0 = tok->token_id("<0xF0>"), a = tok->token_id("a");
  ASSERT_GE(ff, 0);
  ASSERT_GE(f0, 0);
  ASSERT_GE(a, 0);
  StreamDecoder sd2(*tok);
  EXPECT_EQ(sd2.push(a), "a");
  EXPECT_EQ(sd2.push(ff), kFffd);
  EXPECT_EQ(sd2.push(f0), "");
  EXPECT_EQ(sd2.flush(), kFffd);
  EXPECT_EQ(tok->decode({a, ff, f0}), "a" + kFffd + kFffd);
  // After BOS, the first word loses its SentencePiece space; later ones keep it.
  const auto hello = tok->encode("Hello world", true, false);
  ASSERT_EQ(hello.front(), tok->bos());
  EXPECT_EQ(tok->decode(hello), "Hello world");
  EXPECT_EQ(tok->decode(hello, true), "<s> Hello world");
  StreamDecoder sd3(*tok);
  std::string s;
  for (int32_t id : hello) s += sd3.push(id);
  EXPECT_EQ(s, "Hello world");
}

// Garbage never crashes: random bytes through every tokenizer (special parsing on), random ids through decode.
TEST(StreamDecoder, RandomBytesAndIds) {
  std::mt19937 rng(1234);
  for (const char* name : {"llama-spm", "gpt-2", "deepseek-llm", "starcoder", "bert-bge"}) {
    auto tok = load(name);
    ASSERT_TRUE(tok);
    // Lossless for any bytes only when all 256 byte-level characters are normal tokens (deepseek-llm has
    // some as user-defined tokens, which decode as their UTF-8 text, as in llama.cpp).
    bool byte_level = tok->vocab().kind == TokenizerKind::kBpe;
    for (int b = 0; b < 256 && byte_level; ++b) {
      std::string c;
      uni::append_utf8(c, uni::byte_to_cp(static_cast<uint8_t>(b)));
      const int32_t id = tok->token_id(c);
      byte_level = id >= 0 && tok->vocab().types[id] == TokenType::kNormal;
    }
    if (std::string(name) == "gpt-2") {
      EXPECT_TRUE(byte_level) << name;
    }
    for (int iter = 0; iter < 40; ++iter) {
      std::string text(rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(iter % 2 ? rng() % 256 : " a\xC3\xA9\xF0\x9F<|>s"[rng() % 10]);
      const auto ids = tok->encode(text, true, true);
      for (int32_t id : ids) ASSERT_TRUE(tok->valid_id(id));
      if (byte_level) {
        EXPECT_EQ(tok->decode(ids), uni::sanitize(text)) << name;
      }
      std::vector<int32_t> rand_ids(rng() % 32);
      for (int32_t& id : rand_ids) id = static_cast<int32_t>(rng() % (tok->n_vocab() + 10)) - 5;
      for (bool render : {false, true}) {
        StreamDecoder sd(*tok, render);
        std::string streamed;
        for (int32_t id : rand_ids) {
          std::string chunk = sd.push(id);
          ASSERT_TRUE(uni::is_valid_utf8(chunk));
          streamed += chunk;
        }
        streamed += sd.flush();
        EXPECT_EQ(streamed, tok->decode(rand_ids, render)) << name;
      }
    }
  }
}

TEST(SpecialTokens, SpmParseSpecial) {
  auto tok = load("llama-spm");
  ASSERT_TRUE(tok);
  // "<s>" is a control token: matched only with parse_special; a space prefix follows it as in llama.cpp.
  const auto parsed = tok->encode("<s>Hello", false, true);
  EXPECT_EQ(test::ids_str(parsed), test::ids_str({1, 15043}));
  const auto plain = tok->encode("<s>Hello", false, false);
  EXPECT_NE(plain.front(), 1);
  EXPECT_EQ(tok->decode(plain), "<s>Hello");
  const auto with_bos = tok->encode("Hello", true, false);
  EXPECT_EQ(test::ids_str(with_bos), test::ids_str({1, 15043}));
  EXPECT_TRUE(tok->is_eog(2));
}

TEST(SpecialTokens, BertAddsClsSep) {
  auto tok = load("bert-bge");
  ASSERT_TRUE(tok);
  EXPECT_EQ(test::ids_str(tok->encode("Hello world", true, false)), " 101 7592 2088 102");
  EXPECT_EQ(test::ids_str(tok->encode("[CLS] hi [SEP]", false, true)), test::ids_str({101, 7632, 102}));
  EXPECT_EQ(tok->decode({101, 7592, 2088, 102}), "hello world");
}

// Long inputs stay linear-ish: 200 KB of text without spaces (one huge pre-token) encodes and round-trips.
TEST(Performance, LongWordsRoundTrip) {
  for (const char* name : {"gpt-2", "llama-spm"}) {
    auto tok = load(name);
    ASSERT_TRUE(tok);
    std::string text;
    for (int i = 0; i < 20000; ++i) text += "abcdefghij";
    const auto ids = tok->encode(text, false, false);
    EXPECT_LT(ids.size(), text.size() / 2);
    EXPECT_EQ(tok->decode(ids), text);
  }
}

// encode()/decode() are const and used from several HTTP threads at once: results must not depend on that.
TEST(Concurrency, ParallelEncodeMatchesSerial) {
  for (const char* name : {"gpt-2", "llama-spm", "bert-bge"}) {
    auto tok = load(name);
    ASSERT_TRUE(tok);
    const auto inputs = test::read_inp(test::models_dir() + "/llama.cpp-vocab/ggml-vocab-gpt-2.gguf.inp");
    std::vector<std::vector<int32_t>> serial;
    std::vector<std::string> serial_text;
    for (const auto& t : inputs) {
      serial.push_back(tok->encode(t, true, true));
      serial_text.push_back(tok->decode(serial.back()));
    }
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k)
      threads.emplace_back([&, k] {
        for (int rep = 0; rep < 5; ++rep)
          for (size_t i = 0; i < inputs.size(); ++i)
            if (tok->encode(inputs[i], true, true) != serial[i] || tok->decode(serial[i]) != serial_text[i])
              ++mismatches[k];
      });
    for (auto& t : threads) t.join();
    for (int k = 0; k < 4; ++k) EXPECT_EQ(mismatches[k], 0) << name << " thread " << k;
  }
}

}  // namespace
}  // namespace mopt
