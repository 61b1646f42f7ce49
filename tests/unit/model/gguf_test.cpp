// GGUF reader: real files (stories260K, llama.cpp vocab files), synthesized files of every value type and
// tensor dtype, and one test per kind of broken file.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::fails_with;
using test::GgufWriter;

Result<std::unique_ptr<gguf::File>> open_bytes(const std::vector<uint8_t>& b) {
  return gguf::File::open_memory(b.data(), b.size(), "test.gguf");
}

// A small valid file: a few metadata entries and three tensors of different types.
GgufWriter small_writer() {
  GgufWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.block_count", 2);
  w.kv_str_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.tensor("a", test::kF32, {4, 2});
  w.tensor("b", test::kQ8_0, {32, 3});
  w.tensor("c", test::kF16, {8});
  return w;
}

TEST(Gguf, ReadsStories260K) {
  const std::string path = test::model_path("stories260K.gguf");
  REQUIRE_MODEL(path);
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  const gguf::File& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.file_size(), 1185376u);  // README
  EXPECT_EQ(g.alignment(), 32u);
  // README facts.
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.context_length"), 2048);
  EXPECT_EQ(g.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(g.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(g.get_int("llama.block_count"), 5);
  EXPECT_EQ(g.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(g.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(g.get_int("llama.rope.dimension_count"), 8);
  EXPECT_FLOAT_EQ(static_cast<float>(*g.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_FALSE(g.find("llama.rope.freq_base"));
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(g.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(g.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(g.get_int("tokenizer.ggml.eos_token_id"), 2);
  auto toks = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.is_ok());
  ASSERT_EQ(toks->size(), 512u);
  EXPECT_EQ((*toks)[1], "<s>");
  auto scores = g.get_float_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.is_ok());
  EXPECT_EQ(scores->size(), 512u);
  auto types = g.get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.is_ok());
  EXPECT_EQ(types->size(), 512u);
  EXPECT_EQ((*types)[0], 2);  // <unk> is kUnknown
  // Wrong-typed array access is an error, not garbage.
  EXPECT_FALSE(g.get_string_array("tokenizer.ggml.scores").is_ok());
  EXPECT_FALSE(g.get_int_array("tokenizer.ggml.tokens").is_ok());
  // 48 F32 tensors, data inside the file, aligned.
  ASSERT_EQ(g.tensors().size(), 48u);
  for (const auto& t : g.tensors()) {
    EXPECT_EQ(t.view.dtype, DType::F32) << t.view.name;
    EXPECT_EQ(t.offset % 32, 0u);
  }
  const gguf::TensorInfo* emb = g.find_tensor("token_embd.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->view.shape_str(), "[64, 512]");
  EXPECT_EQ(emb->view.nbytes, 64u * 512 * 4);
  const gguf::TensorInfo* k = g.find_tensor("blk.0.attn_k.weight");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->view.shape_str(), "[64, 32]");
  // The last tensor ends within the file.
  const auto& last = g.tensors().back();
  const uint8_t* end = static_cast<const uint8_t*>(last.view.data) + last.view.nbytes;
  EXPECT_LE(end - static_cast<const uint8_t*>(g.tensors().front().view.data), static_cast<ptrdiff_t>(g.file_size()));
}

TEST(Gguf, ReadsVocabOnlyFiles) {
  for (const char* name : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "starcoder", "bert-bge", "baichuan",
                           "gpt-neox"}) {
    const std::string path = test::model_path(std::string("llama.cpp-vocab/ggml-vocab-") + name + ".gguf");
    REQUIRE_MODEL(path);
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.message();
    EXPECT_EQ((*f)->tensors().size(), 0u) << name;
    auto toks = (*f)->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(toks.is_ok()) << name;
    EXPECT_GT(toks->size(), 30000u) << name;
  }
}

TEST(Gguf, EveryValueTypeRoundTrips) {
  GgufWriter w;
  w.version = 2;  // v2 has the same layout as v3
  w.kv_scalar<uint8_t>("u8", test::kGU8, 200);
  w.kv_scalar<int8_t>("i8", test::kGI8, -100);
  w.kv_scalar<uint16_t>("u16", test::kGU16, 60000);
  w.kv_scalar<int16_t>("i16", test::kGI16, -30000);
  w.kv_u32("u32", 4000000000u);
  w.kv_i32("i32", -2000000000);
  w.kv_f32("f32", 0.25f);
  w.kv_bool("bool", true);
  w.kv_str("string", "h\xc3\xa9llo");
  w.kv_u64("u64", 18000000000000000000ull);
  w.kv_scalar<int64_t>("i64", test::kGI64, -9000000000000000000ll);
  w.kv_scalar<double>("f64", test::kGF64, -1.5e300);
  // Nested array: array of 2 arrays of i16.
  test::Bytes nested;
  nested.put<uint32_t>(test::kGArray);
  nested.put<uint64_t>(2);
  for (int k = 0; k < 2; ++k) {
    nested.put<uint32_t>(test::kGI16);
    nested.put<uint64_t>(3);
    for (int16_t x = 0; x < 3; ++x) nested.put<int16_t>(static_cast<int16_t>(x * 10 + k));
  }
  w.kv_raw("nested", test::kGArray, nested.b);
  w.kv_f32_array("floats", {1.0f, -2.0f});
  auto bytes = w.build();
  auto f = open_bytes(bytes);
  ASSERT_TRUE(f.is_ok()) << f.message();
  const gguf::File& g = **f;
  EXPECT_EQ(g.version(), 2u);
  ASSERT_EQ(g.metadata().size(), 14u);
  EXPECT_EQ(g.metadata()[0].first, "u8");  // file order
  EXPECT_EQ(g.get_int("u8"), 200);
  EXPECT_EQ(g.get_int("i8"), -100);
  EXPECT_EQ(g.get_int("u16"), 60000);
  EXPECT_EQ(g.get_int("i16"), -30000);
  EXPECT_EQ(g.get_int("u32"), 4000000000ll);
  EXPECT_EQ(g.get_int("i32"), -2000000000);
  EXPECT_EQ(g.get_float("f32"), 0.25);
  EXPECT_EQ(g.get_bool("bool"), true);
  EXPECT_EQ(g.get_string("string"), "h\xc3\xa9llo");
  EXPECT_EQ(g.find("u64")->u, 18000000000000000000ull);
  EXPECT_EQ(g.get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(g.get_float("f64"), -1.5e300);
  EXPECT_EQ(g.get_float("u32"), 4e9);  // ints read as floats
  EXPECT_FALSE(g.get_int("f32"));      // floats are not ints
  EXPECT_FALSE(g.get_string("u8"));
  const gguf::Value* n = g.find("nested");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->elem_type, gguf::ValueType::kArray);
  ASSERT_EQ(n->arr.size(), 2u);
  ASSERT_EQ(n->arr[1].arr.size(), 3u);
  EXPECT_EQ(n->arr[1].arr[2].i, 21);
  EXPECT_EQ(n->to_string(), "array[2]{i16[3]{0, 10, 20}, i16[3]{1, 11, 21}}");
  auto fl = g.get_float_array("floats");
  ASSERT_TRUE(fl.is_ok());
  EXPECT_EQ(*fl, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_TRUE(g.get_float_array("missing").is_ok());
  EXPECT_TRUE(g.tensors().empty());
}

TEST(Gguf, TensorsOfEverySupportedTypeAndCustomAlignment) {
  GgufWriter w;
  w.alignment = 64;
  w.kv_u32("general.alignment", 64);
  struct Case {
    uint32_t type;
    DType dtype;
    std::vector<uint64_t> ne;
  };
  const Case cases[] = {
      {test::kF32, DType::F32, {3, 5}},     {test::kF16, DType::F16, {7}},
      {test::kQ4_0, DType::Q4_0, {64, 2}},  {test::kQ8_0, DType::Q8_0, {32, 3, 2}},
      {test::kQ4_K, DType::Q4_K, {256, 2}}, {test::kQ5_K, DType::Q5_K, {512}},
      {test::kQ6_K, DType::Q6_K, {256, 1, 1, 3}}, {test::kBF16, DType::BF16, {5, 3}},
  };
  for (size_t i = 0; i < std::size(cases); ++i) w.tensor("t" + std::to_string(i), cases[i].type, cases[i].ne);
  auto bytes = w.build();
  auto f = open_bytes(bytes);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->alignment(), 64u);
  ASSERT_EQ((*f)->tensors().size(), std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    const gguf::TensorInfo& t = (*f)->tensors()[i];
    const auto& src = w.tensors()[i];
    EXPECT_EQ(t.view.dtype, cases[i].dtype) << i;
    EXPECT_EQ(t.ggml_type, cases[i].type);
    EXPECT_EQ(t.view.n_dims, static_cast<int>(cases[i].ne.size()));
    for (size_t d = 0; d < cases[i].ne.size(); ++d) EXPECT_EQ(t.view.ne[d], static_cast<int64_t>(cases[i].ne[d]));
    ASSERT_EQ(t.view.nbytes, src.data.size()) << i;
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(static_cast<const uint8_t*>(t.view.data), bytes.data() + w.data_start + t.offset);
    EXPECT_EQ(std::memcmp(t.view.data, src.data.data(), src.data.size()), 0) << i;
  }
}

TEST(Gguf, DtypeTable) {
  EXPECT_EQ(gguf::dtype_from_ggml_type(0), DType::F32);
  EXPECT_EQ(gguf::dtype_from_ggml_type(1), DType::F16);
  EXPECT_EQ(gguf::dtype_from_ggml_type(2), DType::Q4_0);
  EXPECT_EQ(gguf::dtype_from_ggml_type(8), DType::Q8_0);
  EXPECT_EQ(gguf::dtype_from_ggml_type(12), DType::Q4_K);
  EXPECT_EQ(gguf::dtype_from_ggml_type(13), DType::Q5_K);
  EXPECT_EQ(gguf::dtype_from_ggml_type(14), DType::Q6_K);
  EXPECT_EQ(gguf::dtype_from_ggml_type(30), DType::BF16);
  EXPECT_FALSE(gguf::dtype_from_ggml_type(3));
  EXPECT_FALSE(gguf::dtype_from_ggml_type(9999));
}

// ---- broken files: one test per kind ----

TEST(GgufBad, EveryTruncationIsAnError) {
  GgufWriter w = small_writer();
  auto bytes = w.build();
  auto full = open_bytes(bytes);
  ASSERT_TRUE(full.is_ok()) << full.message();
  // The padding after the last tensor's data is optional: prefixes that keep all tensor data are valid.
  const auto& last = (*full)->tensors().back();
  const size_t data_end = w.data_start + last.offset + last.view.nbytes;
  ASSERT_LT(data_end, bytes.size());
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A heap copy of exactly n bytes, so ASan catches any read past the prefix.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    auto f = gguf::File::open_memory(prefix.data(), prefix.size(), "cut.gguf");
    if (n < data_end) {
      ASSERT_FALSE(f.is_ok()) << "prefix of " << n << " bytes was accepted";
      EXPECT_NE(f.message().find("cut.gguf"), std::string::npos) << f.message();
    } else {
      EXPECT_TRUE(f.is_ok()) << n << ": " << f.message();
    }
  }
}

TEST(GgufBad, TruncationMessageNamesTheEntry) {
  GgufWriter w = small_writer();
  auto bytes = w.build();
  bytes.resize(w.off_tensor_entry[1] + 10);  // inside tensor entry 1's name
  auto f = open_bytes(bytes);
  EXPECT_TRUE(fails_with(f, "truncated"));
  EXPECT_TRUE(fails_with(f, "tensor table entry 1"));
  EXPECT_TRUE(fails_with(f, "file has"));
}

TEST(GgufBad, WrongMagic) {
  GgufWriter w = small_writer();
  w.magic = "GGML";
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "not a GGUF file"));
  EXPECT_TRUE(fails_with(gguf::File::open(test::model_path("stories260K.bin")), "not a GGUF file"));
}

TEST(GgufBad, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    GgufWriter w = small_writer();
    w.version = v;
    auto f = open_bytes(w.build());
    ASSERT_FALSE(f.is_ok()) << v;
    EXPECT_NE(f.message().find("version"), std::string::npos) << f.message();
  }
  GgufWriter w = small_writer();
  w.version = 0x03000000u;
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "big-endian"));
}

TEST(GgufBad, HugeTensorCount) {
  GgufWriter w = small_writer();
  w.n_tensors_override = 1ull << 60;
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "tensor count"));
}

TEST(GgufBad, HugeKvCount) {
  GgufWriter w = small_writer();
  w.n_kv_override = ~0ull;
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "metadata count"));
}

TEST(GgufBad, KvCountLargerThanPresent) {
  GgufWriter w = small_writer();
  w.n_kv_override = 4;  // the tensor table is read as metadata: must fail cleanly
  EXPECT_FALSE(open_bytes(w.build()).is_ok());
}

TEST(GgufBad, HugeStringLength) {
  GgufWriter w = small_writer();
  auto bytes = w.build();
  test::patch<uint64_t>(bytes, w.off_kv[0], ~0ull - 3);  // key length of the first entry
  EXPECT_TRUE(fails_with(open_bytes(bytes), "past the end"));
}

TEST(GgufBad, HugeArrayLength) {
  GgufWriter w;
  w.kv_str_array("tokens", {"x"});
  auto bytes = w.build();
  // key(8+6) + type(4) + elem type(4) -> array length
  test::patch<uint64_t>(bytes, w.off_kv[0] + 8 + 6 + 4 + 4, 1ull << 62);
  EXPECT_TRUE(fails_with(open_bytes(bytes), "array of"));
}

TEST(GgufBad, TooManyMetadataValues) {
  // 5M one-byte values: a small file that would need ~450 MB as parsed values.
  test::Bytes p;
  p.put<uint32_t>(test::kGU8);
  p.put<uint64_t>(5u << 20);
  p.b.resize(p.b.size() + (5u << 20), 1);
  GgufWriter w;
  w.kv_raw("bytes", test::kGArray, p.b);
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "values in total"));
}

TEST(GgufBad, TooDeeplyNestedArrays) {
  test::Bytes p;
  for (int d = 0; d < 20; ++d) {
    p.put<uint32_t>(test::kGArray);
    p.put<uint64_t>(1);
  }
  p.put<uint32_t>(test::kGU8);
  p.put<uint64_t>(0);
  GgufWriter w;
  w.kv_raw("deep", test::kGArray, p.b);
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "nested deeper"));
}

TEST(GgufBad, BadValueTypesAndBool) {
  GgufWriter w;
  w.kv_raw("x", 13, {0, 0, 0, 0});
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "not a GGUF value type"));
  GgufWriter w2;
  w2.kv_raw("b", test::kGBool, {2});
  EXPECT_TRUE(fails_with(open_bytes(w2.build()), "expected 0 or 1"));
  GgufWriter w3;
  test::Bytes p;
  p.put<uint32_t>(77);
  p.put<uint64_t>(0);
  w3.kv_raw("arr", test::kGArray, p.b);
  EXPECT_TRUE(fails_with(open_bytes(w3.build()), "array element type 77"));
}

TEST(GgufBad, NDims) {
  for (uint32_t nd : {0u, 5u, 1000u}) {
    GgufWriter w = small_writer();
    auto bytes = w.build();
    test::patch<uint32_t>(bytes, w.off_tensor_ndims[0], nd);
    EXPECT_TRUE(fails_with(open_bytes(bytes), "n_dims")) << nd;
  }
}

TEST(GgufBad, ZeroAndHugeDims) {
  GgufWriter w = small_writer();
  w.tensors()[0].ne = {4, 0};
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "dimension 1 is 0"));
  GgufWriter w2 = small_writer();
  w2.tensors()[0].ne = {4, 1ull << 63};
  EXPECT_TRUE(fails_with(open_bytes(w2.build()), "too large"));
}

TEST(GgufBad, OverflowingElementCount) {
  GgufWriter w = small_writer();
  w.tensors()[0].ne = {1ull << 32, 1ull << 32};
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "overflows"));
  GgufWriter w2 = small_writer();
  w2.tensors()[0].ne = {1ull << 31, 1ull << 31, 4};  // 2^64 elements
  EXPECT_TRUE(fails_with(open_bytes(w2.build()), "overflows"));
  GgufWriter w3 = small_writer();
  w3.tensors()[0].ne = {1ull << 40, 1ull << 22};  // elements fit in int64, f32 bytes do not
  EXPECT_TRUE(fails_with(open_bytes(w3.build()), "overflows"));
}

TEST(GgufBad, DataPastEndOfFile) {
  GgufWriter w = small_writer();
  w.tensors()[1].offset = 1ull << 40;
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "runs past the end of the file"));
  GgufWriter w2 = small_writer();
  w2.tensors()[2].ne = {8, 1000};  // more data than written
  w2.tensors()[2].data.resize(16);
  EXPECT_TRUE(fails_with(open_bytes(w2.build()), "tensor 'c'"));
  GgufWriter w3 = small_writer();
  w3.tensors()[0].offset = ~0ull & ~31ull;  // aligned, offset + size overflows
  EXPECT_TRUE(fails_with(open_bytes(w3.build()), "runs past the end"));
}

TEST(GgufBad, MisalignedOffset) {
  GgufWriter w = small_writer();
  w.tensors()[1].offset = 36;
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "not a multiple of the alignment 32"));
}

TEST(GgufBad, BadAlignmentValue) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w = small_writer();
    w.kv_u32("general.alignment", a);
    EXPECT_TRUE(fails_with(open_bytes(w.build()), "general.alignment")) << a;
  }
  GgufWriter w = small_writer();
  w.kv_str("general.alignment", "32");
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "general.alignment"));
}

TEST(GgufBad, UnknownAndUnsupportedDtypes) {
  GgufWriter w = small_writer();
  auto bytes = w.build();
  test::patch<uint32_t>(bytes, w.off_tensor_type[0], 200);
  EXPECT_TRUE(fails_with(open_bytes(bytes), "unknown ggml tensor type 200"));
  test::patch<uint32_t>(bytes, w.off_tensor_type[0], 3);  // Q4_1: known, not supported
  EXPECT_TRUE(fails_with(open_bytes(bytes), "Q4_1"));
  // The list of supported types comes from the dtype table, in its order and with the ggml names.
  EXPECT_TRUE(fails_with(open_bytes(bytes), "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"));
  test::patch<uint32_t>(bytes, w.off_tensor_type[0], 15);  // Q8_K: a dtype row, but activations only
  EXPECT_TRUE(fails_with(open_bytes(bytes), "tensor type Q8_K (15) is not supported"));
}

TEST(GgufBad, RowNotMultipleOfBlock) {
  GgufWriter w = small_writer();
  w.tensors()[1].ne = {33, 3};
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "block size"));
}

TEST(GgufBad, DuplicateKeysAndNames) {
  GgufWriter w = small_writer();
  w.kv_u32("llama.block_count", 3);
  EXPECT_TRUE(fails_with(open_bytes(w.build()), "duplicate metadata key"));
  GgufWriter w2 = small_writer();
  w2.tensor("a", test::kF32, {2});
  EXPECT_TRUE(fails_with(open_bytes(w2.build()), "duplicate tensor name"));
}

TEST(GgufBad, EmptyAndMissingFiles) {
  EXPECT_TRUE(fails_with(gguf::File::open_memory(nullptr, 0, "empty.gguf"), "truncated"));
  EXPECT_TRUE(fails_with(gguf::File::open("/nonexistent/x.gguf"), "cannot open"));
}

}  // namespace
}  // namespace mopt
