// tokenizer.json variants beyond byte-level BPE (which code-qwen2-25m covers): SentencePiece-style BPE
// (Llama-2/Mistral layout: Prepend/Replace normalizer, byte fallback) and WordPiece (BERT). The expected ids
// follow from the tiny vocabs by hand.
#include <gtest/gtest.h>

#include "test_util.h"

namespace mopt {
namespace {

std::unique_ptr<Tokenizer> build(const std::string& tj, const std::string& tc) {
  Result<VocabData> v = vocab_from_hf_json(tj, tc, "", "", "tiny");
  EXPECT_TRUE(v.is_ok()) << v.message();
  if (!v) return nullptr;
  auto t = Tokenizer::create(*v);
  EXPECT_TRUE(t.is_ok()) << t.message();
  return t ? std::move(t).value() : nullptr;
}

TEST(HfJson, SentencePieceStyleBpe) {
  const std::string tj = R"({
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "▁": 4, "h": 5, "i": 6, "e": 7, "▁h": 8, "▁hi": 9,
                "x": 10, "y": 11, "xy": 12, "▁x": 13},
      "merges": ["▁ h", "▁h i", "x y", "▁ x"]},
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}]})";
  const std::string tc = R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}})";
  auto tok = build(tj, tc);
  ASSERT_TRUE(tok);
  const VocabData& v = tok->vocab();
  EXPECT_EQ(v.kind, TokenizerKind::kSpm);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.types[3], TokenType::kByte);
  EXPECT_EQ(test::ids_str(tok->encode("hi hi\n", true, false)), " 1 9 9 3");
  EXPECT_EQ(test::ids_str(tok->encode("he", false, false)), " 8 7");
  // "▁x" (rank 3) must not win over "x y" (rank 2): "▁xy" -> "▁" "xy".
  EXPECT_EQ(test::ids_str(tok->encode("xy", false, false)), " 4 12");
  EXPECT_EQ(test::ids_str(tok->encode("q", false, false)), " 4 0");  // no <0x71> byte token: <unk>
  EXPECT_EQ(tok->decode({1, 9, 9, 3}), "hi hi\n");
}

TEST(HfJson, WordPiece) {
  const std::string tj = R"({
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
      "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "##s": 6, ",": 7, "un": 8,
                "##aff": 9, "##able": 10, "我": 11}},
    "added_tokens": [{"id": 0, "content": "[PAD]", "special": true}, {"id": 1, "content": "[UNK]", "special": true},
                     {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true}],
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]}})";
  const std::string tc = R"({"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]"})";
  auto tok = build(tj, tc);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab().kind, TokenizerKind::kWordPiece);
  EXPECT_EQ(tok->vocab().unk, 1);
  // Lowercasing, accent stripping (Ü -> u), punctuation split, ## continuations, CJK isolated, unknown words.
  EXPECT_EQ(test::ids_str(tok->encode("Hello, Worlds unaffable \xC3\x9CNAFF\xE6\x88\x91zz", true, false)),
            " 2 4 7 5 6 8 9 10 8 9 11 1 3");
  EXPECT_EQ(tok->decode({2, 4, 7, 5, 6, 3}), "hello , worlds");
}

}  // namespace
}  // namespace mopt
