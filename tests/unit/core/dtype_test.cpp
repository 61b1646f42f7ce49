// The dtype table: rows consistent with each other and with the formats' published facts (GGUF ggml_type ids,
// safetensors names, block sizes), name lookups, row sizes, and the lists generated from it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/dtype.h"

namespace mopt {
namespace {

TEST(DType, OneRowPerTypeInOrder) {
  ASSERT_EQ(dtype_table().size(), static_cast<size_t>(kNumDTypes));
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(static_cast<int>(dtype_table()[i].type), i);
    EXPECT_EQ(&dtype_traits(static_cast<DType>(i)), &dtype_table()[i]);
  }
}

// Published facts: ggml.h's ggml_type ids and block sizes, the safetensors dtype strings.
TEST(DType, KnownFacts) {
  struct Fact {
    DType t;
    const char* name;
    int ggml, elems, bytes;
  };
  const Fact facts[] = {{DType::F32, "f32", 0, 1, 4},       {DType::F16, "f16", 1, 1, 2},
                        {DType::BF16, "bf16", 30, 1, 2},    {DType::Q8_0, "q8_0", 8, 32, 34},
                        {DType::Q4_0, "q4_0", 2, 32, 18},   {DType::Q4_K, "q4_k", 12, 256, 144},
                        {DType::Q5_K, "q5_k", 13, 256, 176}, {DType::Q6_K, "q6_k", 14, 256, 210},
                        {DType::Q8_K, "q8_k", 15, 256, 292}, {DType::I8, "i8", 24, 1, 1},
                        {DType::I32, "i32", 26, 1, 4},      {DType::Q5_0, "q5_0", 6, 32, 22},
                        {DType::Q5_1, "q5_1", 7, 32, 24},   {DType::I64, "i64", 27, 1, 8}};
  for (const Fact& f : facts) {
    const DTypeTraits& r = dtype_traits(f.t);
    EXPECT_STREQ(r.name, f.name);
    EXPECT_EQ(r.ggml_type, f.ggml) << f.name;
    EXPECT_EQ(r.block_elems, f.elems) << f.name;
    EXPECT_EQ(r.block_bytes, f.bytes) << f.name;
  }
  EXPECT_STREQ(dtype_traits(DType::BF16).safetensors_name, "BF16");
  EXPECT_STREQ(dtype_traits(DType::F16).torch_name, "float16");
  EXPECT_EQ(dtype_traits(DType::Q8_0).safetensors_name, nullptr);
  EXPECT_STREQ(dtype_traits(DType::F8_E4M3).safetensors_name, "F8_E4M3");
  EXPECT_STREQ(dtype_traits(DType::F8_E4M3).torch_name, "float8_e4m3fn");
  EXPECT_STREQ(dtype_traits(DType::I64).safetensors_name, "I64");
}

// What every reader of the table relies on: unique names and ids, a weight type converts both ways and names an
// activation type that converts from fp32 and whose blocks tile the weight's, only plain float types go to CUDA.
TEST(DType, RowsAreConsistent) {
  std::set<std::string> names;
  std::set<int> ggml_ids;
  for (const DTypeTraits& r : dtype_table()) {
    EXPECT_TRUE(names.insert(r.name).second) << "duplicate name " << r.name;
    if (r.ggml_type >= 0) {
      EXPECT_TRUE(ggml_ids.insert(r.ggml_type).second) << "duplicate ggml id of " << r.name;
    }
    EXPECT_GT(r.block_elems, 0) << r.name;
    EXPECT_GT(r.block_bytes, 0) << r.name;
    EXPECT_EQ(r.quantized, r.block_elems > 1) << r.name;
    if (r.weight) {
      EXPECT_TRUE(r.to_float && r.from_float) << r.name;
      ASSERT_TRUE(r.vec_dot_type.has_value()) << r.name;
      const DTypeTraits& a = dtype_traits(*r.vec_dot_type);
      EXPECT_TRUE(a.from_float) << r.name;
      EXPECT_EQ(a.block_elems % r.block_elems == 0 || r.block_elems % a.block_elems == 0, true) << r.name;
    } else {
      EXPECT_FALSE(r.vec_dot_type.has_value()) << r.name;
    }
    if (r.cuda_upload == CudaUpload::kConvert) {
      EXPECT_TRUE(r.weight && !r.quantized) << r.name;
    }
    if (r.cuda_upload == CudaUpload::kRepack) {
      EXPECT_TRUE(r.weight && r.quantized && r.to_float) << r.name;
    }
  }
}

TEST(DType, NamesAndRowBytes) {
  for (const DTypeTraits& r : dtype_table()) EXPECT_EQ(dtype_from_name(r.name), r.type);
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_FALSE(dtype_from_name("q4_1"));
  EXPECT_FALSE(dtype_from_name(""));
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::F16, 3), 6u);
  EXPECT_FALSE(row_bytes(DType::Q8_0, 48));                 // not a multiple of 32
  EXPECT_FALSE(row_bytes(DType::F32, uint64_t{1} << 63));   // overflows
}

TEST(DType, GeneratedLists) {
  auto some = [](const DTypeTraits& r) { return r.type == DType::Q4_K || r.type == DType::F16; };
  EXPECT_EQ(dtype_list(some), "f16, q4_k");  // table order
  EXPECT_EQ(dtype_list(some, [](const DTypeTraits& r) { return std::string("<") + r.name + ">"; }), "<f16>, <q4_k>");
  EXPECT_EQ(dtype_list([](const DTypeTraits&) { return false; }), "");
}

TEST(DTypeDeathTest, ConversionsCheckTheRow) {
  float x[32] = {};
  uint8_t q[34];
  EXPECT_DEATH(quantize_row_ref(DType::Q8_0, x, q, 31), "block size 32");
  EXPECT_DEATH(dequantize_row_ref(DType::I32, q, x, 1), "no conversion");
}

}  // namespace
}  // namespace mopt
