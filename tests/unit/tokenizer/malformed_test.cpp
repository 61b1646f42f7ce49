// Bad tokenizer data gives a clear error Status (never a crash): empty vocabs, out-of-range ids, merges naming
// unknown tokens, broken tokenizer.json, broken llama2.c tokenizer files, broken GGUF tokenizer metadata.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.h"
#include "tokenizer/unicode.h"

namespace mopt {
namespace {

::testing::AssertionResult fails_with(const Status& s, const std::string& needle) {
  if (s.is_ok()) return ::testing::AssertionFailure() << "expected an error containing \"" << needle << "\", got ok";
  if (s.message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "error \"" << s.message() << "\" does not mention \"" << needle << "\"";
  return ::testing::AssertionSuccess();
}

// A tiny valid byte-level BPE vocab: the 256 byte characters plus "he", "hel".
VocabData tiny_bpe() {
  VocabData v;
  v.kind = TokenizerKind::kBpe;
  v.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) {
    std::string c;
    uni::append_utf8(c, uni::byte_to_cp(static_cast<uint8_t>(b)));
    v.tokens.push_back(c);
  }
  v.tokens.push_back("he");
  v.tokens.push_back("hel");
  v.merges = {"h e", "he l"};
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  return v;
}

TEST(Malformed, TinyVocabIsValid) {
  VocabData v = tiny_bpe();
  auto t = Tokenizer::create(v);
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(test::ids_str((*t)->encode("hello", false, false)), " 257 108 111");  // "hel" "l" "o"
}

TEST(Malformed, VocabChecks) {
  VocabData v = tiny_bpe();
  v.tokens.clear();
  v.types.clear();
  v.merges.clear();
  EXPECT_TRUE(fails_with(Tokenizer::create(v).status(), "empty"));

  v = tiny_bpe();
  v.bos = 99999;
  EXPECT_TRUE(fails_with(Tokenizer::create(v).status(), "bos = 99999 is out of range"));
  v = tiny_bpe();
  v.eos = -7;
  EXPECT_TRUE(fails_with(validate_vocab(v), "eos"));
  v = tiny_bpe();
  v.eog_ids = {5000};
  EXPECT_TRUE(fails_with(validate_vocab(v), "5000"));
  v = tiny_bpe();
  v.add_bos = true;
  EXPECT_TRUE(fails_with(validate_vocab(v), "no bos id"));

  v = tiny_bpe();
  v.merges.push_back("h zz");
  EXPECT_TRUE(fails_with(Tokenizer::create(v).status(), "unknown token \"zz\""));
  v = tiny_bpe();
  v.merges.push_back("l o");  // "lo" is not a token
  EXPECT_TRUE(fails_with(validate_vocab(v), "not a token"));
  v = tiny_bpe();
  v.merges.push_back("hel");
  EXPECT_TRUE(fails_with(validate_vocab(v), "separated by one space"));

  v = tiny_bpe();
  v.types.pop_back();
  EXPECT_TRUE(fails_with(validate_vocab(v), "token types"));
  v = tiny_bpe();
  v.scores = {1.0f};
  EXPECT_TRUE(fails_with(validate_vocab(v), "scores"));
  v = tiny_bpe();
  v.types[3] = static_cast<TokenType>(42);
  EXPECT_TRUE(fails_with(validate_vocab(v), "invalid token type 42"));

  v = tiny_bpe();
  v.pre = "no-such-pre";
  EXPECT_TRUE(fails_with(Tokenizer::create(v).status(), "unknown pre-tokenizer \"no-such-pre\""));
  v = tiny_bpe();
  v.pre = "custom";
  v.pre_regex = {"(unclosed"};
  EXPECT_TRUE(fails_with(Tokenizer::create(v).status(), "does not compile"));

  VocabData none;
  EXPECT_TRUE(fails_with(Tokenizer::create(none).status(), "no tokenizer"));
}

Status hf(const std::string& tj, const std::string& tc = "", const std::string& cfg = "") {
  return vocab_from_hf_json(tj, tc, cfg, "", "testdir").status();
}

const char* kGoodTj = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "added_tokens": [{"id": 3, "content": "<|end|>", "special": true}]})";

TEST(Malformed, TokenizerJson) {
  EXPECT_TRUE(hf(kGoodTj).is_ok()) << hf(kGoodTj).message();
  EXPECT_TRUE(fails_with(hf("this is not json"), "testdir/tokenizer.json: not valid JSON"));
  EXPECT_TRUE(fails_with(hf(""), "not valid JSON"));
  EXPECT_TRUE(fails_with(hf("[1, 2]"), "JSON object"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": []}})"), "\"vocab\" object"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": "zero"}}})"), "integer id"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": -4}}})"), "invalid id"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {}}})"), "empty"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"type": "Unigram", "vocab": {"a": 0}}})"), "Unigram"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0, "b": 1}, "merges": 7},
      "pre_tokenizer": {"type": "ByteLevel"}})"), "merges must be a list"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0, "b": 1}, "merges": [[1, 2]]},
      "pre_tokenizer": {"type": "ByteLevel"}})"), "merge 0"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0, "b": 1}, "merges": ["a c"]},
      "pre_tokenizer": {"type": "ByteLevel"}})"), "unknown token \"c\""));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0}}, "added_tokens": {"id": 1}})"), "added_tokens"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": "x", "content": "y"}]})"),
                         "added token"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0}}, "pre_tokenizer": {"type": "Weird"}})"), "Weird"));
  EXPECT_TRUE(fails_with(hf(R"({"model": {"vocab": {"a": 0}}, "pre_tokenizer": 5})"), "pre_tokenizer"));
  // tokenizer_config.json / config.json problems.
  EXPECT_TRUE(fails_with(hf(kGoodTj, "{oops"), "tokenizer_config.json: not valid JSON"));
  EXPECT_TRUE(fails_with(hf(kGoodTj, R"({"eos_token": "<|nope|>"})"), "eos_token \"<|nope|>\" is not in the vocab"));
  EXPECT_TRUE(fails_with(hf(kGoodTj, R"({"eos_token": 5})"), "eos_token"));
  EXPECT_TRUE(fails_with(hf(kGoodTj, R"({"add_bos_token": "yes"})"), "add_bos_token"));
  EXPECT_TRUE(fails_with(hf(kGoodTj, "", R"({"eos_token_id": 99999})"), "eos_token_id = 99999"));
  EXPECT_TRUE(fails_with(hf(kGoodTj, "", R"({"eos_token_id": [1, "x"]})"), "eos_token_id"));
  // A regex that does not compile is reported when the tokenizer is built.
  Result<VocabData> v = vocab_from_hf_json(R"({"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer":
      {"type": "Split", "pattern": {"Regex": "[a-"}, "behavior": "Isolated"}})", "", "", "", "t");
  ASSERT_TRUE(v.is_ok()) << v.message();
  EXPECT_EQ(v->pre, "custom");
  EXPECT_TRUE(fails_with(Tokenizer::create(*v).status(), "does not compile"));
}

TEST(Malformed, Llama2cTokenizer) {
  auto bin = [](std::initializer_list<int32_t> words, const std::string& tail = "") {
    std::string s(reinterpret_cast<const char*>(words.begin()), words.size() * 4);
    return s + tail;
  };
  auto parse = [](const std::string& data) { return vocab_from_llama2c_bytes(data, "tok.bin").status(); };
  EXPECT_TRUE(fails_with(parse(""), "too small"));
  EXPECT_TRUE(fails_with(parse(bin({-3})), "max_token_length = -3"));
  EXPECT_TRUE(fails_with(parse(bin({0x7fffffff})), "max_token_length"));
  EXPECT_TRUE(fails_with(parse(bin({8})), "only 0 tokens"));
  EXPECT_TRUE(fails_with(parse(bin({8, 0, -5})), "length -5"));
  EXPECT_TRUE(fails_with(parse(bin({8, 0, 0x7fffffff})), "length 2147483647"));
  EXPECT_TRUE(fails_with(parse(bin({8, 0, 6}, "abc")), "truncated in token 0"));
  EXPECT_TRUE(fails_with(parse(bin({8, 0}, "ab")), "truncated at token"));
  EXPECT_TRUE(fails_with(vocab_from_llama2c("/nonexistent/tok.bin").status(), "/nonexistent/tok.bin"));
  // Every prefix of the real file: an error, or (cut at a token boundary) a smaller valid vocab.
  const std::string real = test::read_text(test::models_dir() + "/tok512.bin");
  ASSERT_EQ(real.size(), 6227u);
  int ok = 0;
  for (size_t n = 0; n < real.size(); n += 7) {
    Result<VocabData> r = vocab_from_llama2c_bytes(std::string_view(real).substr(0, n), "tok512.bin");
    if (r.is_ok()) {
      ++ok;
      EXPECT_LT(r->tokens.size(), 512u);
    } else {
      EXPECT_NE(r.message().find("tok512.bin"), std::string::npos);
    }
  }
  EXPECT_LT(ok, 200);
}

// Minimal GGUF v3 writer for metadata-only files.
class GgufBuilder {
 public:
  GgufBuilder& str(const std::string& key, const std::string& v) {
    kv(key, 8);
    put_str(v);
    return ++n_, *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) {
    kv(key, 4);
    put(v);
    return ++n_, *this;
  }
  GgufBuilder& boolean(const std::string& key, bool v) {
    kv(key, 7);
    put(static_cast<uint8_t>(v));
    return ++n_, *this;
  }
  GgufBuilder& strs(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9);
    put(uint32_t{8});
    put(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) put_str(s);
    return ++n_, *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
    kv(key, 9);
    put(uint32_t{5});
    put(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(x);
    return ++n_, *this;
  }
  std::string bytes() const {
    std::string h = "GGUF";
    auto add = [&](auto x) { h.append(reinterpret_cast<const char*>(&x), sizeof(x)); };
    add(uint32_t{3});
    add(uint64_t{0});
    add(n_);
    return h + body_;
  }

 private:
  template <class T>
  void put(T x) {
    body_.append(reinterpret_cast<const char*>(&x), sizeof(x));
  }
  void put_str(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    body_ += s;
  }
  void kv(const std::string& key, uint32_t type) {
    put_str(key);
    put(type);
  }
  std::string body_;
  uint64_t n_ = 0;
};

Status gguf_vocab(const GgufBuilder& b) {
  const std::string data = b.bytes();
  MOPT_ASSIGN_OR_RETURN(auto f, gguf::File::open_memory(data.data(), data.size(), "mem.gguf"));
  return vocab_from_gguf(*f).status();
}

GgufBuilder spm_base() {
  GgufBuilder b;
  b.str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a"});
  return b;
}

TEST(Malformed, GgufMetadata) {
  EXPECT_TRUE(gguf_vocab(spm_base()).is_ok()) << gguf_vocab(spm_base()).message();
  EXPECT_TRUE(fails_with(gguf_vocab(spm_base().u32("tokenizer.ggml.bos_token_id", 99999)),
                         "tokenizer.ggml.bos_token_id = 99999 is out of range"));
  EXPECT_TRUE(gguf_vocab(spm_base().u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu)).is_ok());  // "none"
  EXPECT_TRUE(fails_with(gguf_vocab(spm_base().str("tokenizer.ggml.eos_token_id", "2")), "expected an integer"));
  EXPECT_TRUE(fails_with(gguf_vocab(spm_base().i32s("tokenizer.ggml.token_type", {1, 3})), "token_type has 2"));
  EXPECT_TRUE(fails_with(gguf_vocab(spm_base().i32s("tokenizer.ggml.token_type", {1, 3, 3, 9})), "= 9"));
  EXPECT_TRUE(fails_with(gguf_vocab(spm_base().u32("tokenizer.ggml.add_bos_token", 1)), "expected a bool"));
  GgufBuilder empty;
  empty.str("tokenizer.ggml.model", "llama").strs("tokenizer.ggml.tokens", {});
  EXPECT_TRUE(fails_with(gguf_vocab(empty), "missing or empty"));
  GgufBuilder t5;
  t5.str("tokenizer.ggml.model", "t5").strs("tokenizer.ggml.tokens", {"a"});
  EXPECT_TRUE(fails_with(gguf_vocab(t5), "\"t5\" is not supported"));
  GgufBuilder bad_merge;
  bad_merge.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "gpt-2")
      .strs("tokenizer.ggml.tokens", {"a", "b", "ab"}).strs("tokenizer.ggml.merges", {"a b", "a q"});
  EXPECT_TRUE(fails_with(gguf_vocab(bad_merge), "unknown token \"q\""));
  GgufBuilder bad_pre;
  bad_pre.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "martian")
      .strs("tokenizer.ggml.tokens", {"a", "b", "ab"}).strs("tokenizer.ggml.merges", {"a b"});
  EXPECT_TRUE(fails_with(gguf_vocab(bad_pre), "unknown pre-tokenizer \"martian\""));
  GgufBuilder wrong_type;
  wrong_type.u32("tokenizer.ggml.model", 3);
  EXPECT_TRUE(fails_with(gguf_vocab(wrong_type), "tokenizer.ggml.model: expected a string"));
  GgufBuilder no_tok;  // no tokenizer at all: kind none, which Tokenizer::create refuses clearly
  no_tok.str("general.architecture", "llama");
  EXPECT_TRUE(gguf_vocab(no_tok).is_ok());
}

}  // namespace
}  // namespace mopt
