// The GGUF writer against the GGUF reader (model/gguf.h): metadata of every common type, tensors of several types at
// aligned offsets, byte for byte.
#include <gtest/gtest.h>

#include "model/gguf.h"
#include "quant/gguf_writer.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

using namespace quant;

TEST(GgufWriter, ReaderSeesWhatWasWritten) {
  const std::string path = test::scratch_dir() + "/t.gguf";
  GgufWriter w;
  w.set("general.architecture", gguf_string("llama"));
  w.set("llama.block_count", gguf_u32(3));
  w.set("x.i32", gguf_i32(-5));
  w.set("x.f32", gguf_f32(0.25f));
  w.set("x.bool", gguf_bool(true));
  w.set("x.strings", gguf_string_array({"a", "", "c d"}));
  w.set("x.floats", gguf_f32_array({1.5f, -2.0f}));
  w.set("x.ints", gguf_i32_array({7, -8, 9}));
  w.set("llama.block_count", gguf_u32(4));  // replaced in place
  w.set("x.gone", gguf_u32(1));
  w.erase("x.gone");
  std::vector<float> a(64), b(32 * 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint8_t> qb(*row_bytes(DType::Q8_0, 96));
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::sin(static_cast<float>(i));
  quantize_row_ref(DType::Q8_0, b.data(), qb.data(), 96);
  w.add_tensor("a", DType::F32, 1, {64, 1, 1, 1});
  w.add_tensor("b", DType::Q8_0, 2, {32, 3, 1, 1});
  {
    auto f = OutputFile::create(path);
    ASSERT_TRUE(w.write_header(**f).is_ok());
    ASSERT_TRUE(w.write_tensor(**f, 0, a.data(), a.size() * 4).is_ok());
    ASSERT_TRUE(w.write_tensor(**f, 1, qb.data(), qb.size()).is_ok());
    EXPECT_EQ((*f)->offset(), w.file_bytes());
    ASSERT_TRUE((*f)->commit().is_ok());
  }
  auto r = gguf::File::open(path);
  ASSERT_TRUE(r) << r.message();
  const gguf::File& g = **r;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), 8u);
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.block_count"), 4);
  EXPECT_EQ(g.get_int("x.i32"), -5);
  EXPECT_EQ(g.get_float("x.f32"), 0.25);
  EXPECT_EQ(g.get_bool("x.bool"), true);
  EXPECT_EQ(*g.get_string_array("x.strings"), (std::vector<std::string>{"a", "", "c d"}));
  EXPECT_EQ(*g.get_float_array("x.floats"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(*g.get_int_array("x.ints"), (std::vector<int64_t>{7, -8, 9}));
  EXPECT_FALSE(g.find("x.gone"));
  ASSERT_EQ(g.tensors().size(), 2u);
  const gguf::TensorInfo* ta = g.find_tensor("a");
  const gguf::TensorInfo* tb = g.find_tensor("b");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->view.dtype, DType::F32);
  EXPECT_EQ(tb->view.dtype, DType::Q8_0);
  EXPECT_EQ(tb->view.ne[0], 32);
  EXPECT_EQ(tb->view.ne[1], 3);
  EXPECT_EQ(tb->offset % 32, 0u);
  EXPECT_EQ(0, std::memcmp(ta->view.data, a.data(), a.size() * 4));
  EXPECT_EQ(0, std::memcmp(tb->view.data, qb.data(), qb.size()));
}

}  // namespace
}  // namespace mopt
