// Quantized Hugging Face layouts (model/hf_quant.h): quantization_config parsing, and tensors built by hand from the
// layouts' public descriptions (AutoAWQ GEMM packing, compressed-tensors pack-quantized and float-quantized)
// assembled and dequantized against the descriptions' formulas.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.h"
#include "model/hf_quant.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using json = nlohmann::json;
using test::fails_with;

TensorView view(const std::string& name, DType t, std::vector<int64_t> torch_shape, const void* data) {
  TensorView v;
  v.name = name;
  v.dtype = t;
  v.n_dims = static_cast<int>(torch_shape.size());
  uint64_t n = 1;
  for (size_t i = 0; i < torch_shape.size(); ++i) {
    v.ne[torch_shape.size() - 1 - i] = torch_shape[i];
    n *= static_cast<uint64_t>(torch_shape[i]);
  }
  v.data = data;
  v.nbytes = *row_bytes(t, n);
  return v;
}

std::vector<float> dequant(const TensorView& t) {
  std::vector<float> y(static_cast<size_t>(t.n_elements()));
  dequantize_row_ref(t.dtype, t.data, y.data(), t.n_elements());
  return y;
}

const TensorView* find(const std::vector<TensorView>& ts, const std::string& name) {
  for (const TensorView& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(HfQuant, ParsesTheConfigsOfEachLayout) {
  auto parse = [](const char* text) { return parse_hf_quant_config(json::parse(text)); };
  EXPECT_EQ(parse(R"({})")->layout, HfQuantLayout::kNone);
  EXPECT_EQ(parse(R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                      "zero_point": true, "version": "gemm"}})")->layout, HfQuantLayout::kAwq);
  EXPECT_EQ(parse(R"({"quantization_config": {"quant_method": "awq", "w_bit": 4, "q_group_size": 128,
                      "zero_point": true, "version": "GEMM"}})")->layout, HfQuantLayout::kAwq);
  EXPECT_EQ(parse(R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}})")->layout,
            HfQuantLayout::kFp8);
  EXPECT_EQ(parse(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "compressed", "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}}})")->layout,
            HfQuantLayout::kFp8);
  EXPECT_EQ(parse(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
      "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true}}}}})")->layout,
            HfQuantLayout::kInt8);
  // What mopt does not run: named, with the supported list.
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})"),
                         "quant_method \"gptq\" is not supported (supported: compressed-tensors"));
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64,
                                   "zero_point": true, "version": "gemm"}})"), "group_size 64"));
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}})"),
                         "activation_scheme \"static\""));
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "format": "float-quantized", "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float",
      "strategy": "channel"}, "input_activations": {"num_bits": 8, "type": "float", "dynamic": false}}}}})"),
                         "dynamic fp8 activations"));
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "format": "pack-quantized", "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int",
      "strategy": "group", "group_size": 128, "symmetric": true}}}}})"), "is not supported"));
  EXPECT_TRUE(fails_with(parse(R"({"quantization_config": 3})"), "expected an object"));
}

// AutoAWQ GEMM: qweight [K, N/8] I32, nibble i of word (k, c) = column 8c + order[i] with the published order
// 0, 2, 4, 6, 1, 3, 5, 7; qzeros the same per group; scales fp16 [K/128, N]; W = s * (q - z).
TEST(HfQuant, AwqGemmLayoutByHand) {
  const int N = 16, K = 256, G = K / 128;
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  auto q = [](int k, int n) { return (k * 7 + n * 3) % 16; };
  auto z = [](int g, int n) { return (g + n) % 16; };
  auto s = [](int g, int n) { return 0.25f * static_cast<float>(1 + g + n); };
  std::vector<int32_t> qweight(K * N / 8, 0), qzeros(G * N / 8, 0);
  std::vector<uint16_t> scales(G * N);
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        qweight[k * (N / 8) + c] |= static_cast<int32_t>(static_cast<uint32_t>(q(k, 8 * c + order[i])) << (4 * i));
  for (int g = 0; g < G; ++g) {
    for (int c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        qzeros[g * (N / 8) + c] |= static_cast<int32_t>(static_cast<uint32_t>(z(g, 8 * c + order[i])) << (4 * i));
    for (int n = 0; n < N; ++n) scales[g * N + n] = fp32_to_fp16(s(g, n));
  }
  const std::string p = "model.layers.0.mlp.up_proj";
  std::vector<TensorView> ts = {view(p + ".qweight", DType::I32, {K, N / 8}, qweight.data()),
                                view(p + ".qzeros", DType::I32, {G, N / 8}, qzeros.data()),
                                view(p + ".scales", DType::F16, {G, N}, scales.data())};
  std::vector<std::vector<uint8_t>> owned;
  HfQuantConfig qc;
  qc.layout = HfQuantLayout::kAwq;
  ASSERT_TRUE(assemble_hf_quant(qc, ts, owned).is_ok());
  ASSERT_EQ(ts.size(), 1u);
  const TensorView& w = ts[0];
  EXPECT_EQ(w.name, p + ".weight");
  EXPECT_EQ(w.dtype, DType::INT4_G128);
  EXPECT_EQ(w.ne[0], K);
  EXPECT_EQ(w.ne[1], N);
  const std::vector<float> y = dequant(w);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      ASSERT_EQ(y[n * K + k], s(k / 128, n) * static_cast<float>(q(k, n) - z(k / 128, n))) << n << " " << k;
  // awq_pack writes the same words back.
  const AwqPacked back = awq_pack(static_cast<const BlockINT4_G128*>(w.data), N, K);
  EXPECT_EQ(back.qweight, qweight);
  EXPECT_EQ(back.qzeros, qzeros);
  EXPECT_EQ(back.scales, scales);
}

// Matrices large enough to be split over threads (a partial last band of word columns too): awq_unpack and
// int8_unpack give the blocks the layouts' formulas say (spot checks against the words), and packing them again
// gives back every word.
TEST(HfQuant, LargeMatricesUnpackAndPackBack) {
  const int64_t N = 8 * 100, K = 4096, G = K / 128, C = N / 8;  // 100 word columns: bands of 32, 32, 32, 4
  std::mt19937 rng(7);
  std::vector<int32_t> qweight(static_cast<size_t>(K * C)), qzeros(static_cast<size_t>(G * C));
  std::vector<uint16_t> scales(static_cast<size_t>(G * N));
  for (int32_t& w : qweight) w = static_cast<int32_t>(rng());
  for (int32_t& w : qzeros) w = static_cast<int32_t>(rng());
  for (uint16_t& s : scales) s = fp32_to_fp16(static_cast<float>(rng() % 1000 + 1) / 4096.f);
  std::vector<BlockINT4_G128> blocks(static_cast<size_t>(N * G));
  awq_unpack(qweight.data(), qzeros.data(), scales.data(), N, K, blocks.data());
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i of a word: column 8c + order[i]
  auto nibble_of = [&](uint32_t word, int64_t n) {
    for (int i = 0; i < 8; ++i)
      if (order[i] == n % 8) return static_cast<int>((word >> (4 * i)) & 15u);
    return -1;
  };
  for (int t = 0; t < 2000; ++t) {
    const int64_t n = static_cast<int64_t>(rng() % N), k = static_cast<int64_t>(rng() % K), g = k / 128;
    const BlockINT4_G128& b = blocks[static_cast<size_t>(n * G + g)];
    const int j = static_cast<int>(k % 128);
    const int q = j < 64 ? b.qs[j] & 15 : b.qs[j - 64] >> 4;
    ASSERT_EQ(q, nibble_of(static_cast<uint32_t>(qweight[static_cast<size_t>(k * C + n / 8)]), n)) << n << " " << k;
    ASSERT_EQ(b.z, nibble_of(static_cast<uint32_t>(qzeros[static_cast<size_t>(g * C + n / 8)]), n));
    ASSERT_EQ(b.d, scales[static_cast<size_t>(g * N + n)]);
    ASSERT_EQ(b.pad, 0);
  }
  const AwqPacked back = awq_pack(blocks.data(), N, K);
  EXPECT_EQ(back.qweight, qweight);
  EXPECT_EQ(back.qzeros, qzeros);
  EXPECT_EQ(back.scales, scales);

  const int64_t N8 = 700, K8 = 4096;
  std::vector<int32_t> packed(static_cast<size_t>(N8 * K8 / 4));
  for (int32_t& w : packed) w = static_cast<int32_t>(rng());
  std::vector<float> row_scale(static_cast<size_t>(N8));
  for (float& s : row_scale) s = static_cast<float>(rng() % 1000 + 1) / 1024.f;
  std::vector<BlockINT8> b8(static_cast<size_t>(N8 * K8 / 32));
  int8_unpack(packed.data(), row_scale.data(), N8, K8, b8.data());
  for (int t = 0; t < 2000; ++t) {
    const int64_t n = static_cast<int64_t>(rng() % N8), k = static_cast<int64_t>(rng() % K8);
    const BlockINT8& b = b8[static_cast<size_t>(n * (K8 / 32) + k / 32)];
    const uint32_t word = static_cast<uint32_t>(packed[static_cast<size_t>(n * (K8 / 4) + k / 4)]);
    ASSERT_EQ(b.qs[k % 32], static_cast<int>((word >> (8 * (k % 4))) & 255u) - 128) << n << " " << k;
    ASSERT_EQ(b.d, row_scale[static_cast<size_t>(n)]);
  }
  EXPECT_EQ(int8_pack(b8.data(), N8, K8), packed);
}

// compressed-tensors pack-quantized, 8 bits: byte j of word c is q[4c + j] + 128; weight_shape {N, K}.
TEST(HfQuant, PackQuantizedInt8ByHand) {
  const int N = 3, K = 64;
  auto q = [](int n, int k) { return (n * 37 + k * 11) % 256 - 128; };
  std::vector<int32_t> packed(N * K / 4, 0);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      packed[n * (K / 4) + k / 4] |= static_cast<int32_t>(static_cast<uint32_t>(q(n, k) + 128) << (8 * (k % 4)));
  const std::vector<uint16_t> scale = {fp32_to_bf16(0.5f), fp32_to_bf16(0.25f), fp32_to_bf16(2.0f)};
  const int64_t shape[2] = {N, K};
  const std::string p = "model.layers.1.self_attn.o_proj";
  std::vector<TensorView> ts = {view(p + ".weight_packed", DType::I32, {N, K / 4}, packed.data()),
                                view(p + ".weight_scale", DType::BF16, {N, 1}, scale.data()),
                                view(p + ".weight_shape", DType::I64, {2}, shape)};
  std::vector<std::vector<uint8_t>> owned;
  HfQuantConfig qc;
  qc.layout = HfQuantLayout::kInt8;
  ASSERT_TRUE(assemble_hf_quant(qc, ts, owned).is_ok());
  ASSERT_EQ(ts.size(), 1u);
  EXPECT_EQ(ts[0].dtype, DType::INT8);
  const std::vector<float> y = dequant(ts[0]);
  const float sc[3] = {0.5f, 0.25f, 2.0f};
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) ASSERT_EQ(y[n * K + k], sc[n] * static_cast<float>(q(n, k))) << n << " " << k;
  EXPECT_EQ(int8_pack(static_cast<const BlockINT8*>(ts[0].data), N, K), packed);
}

// float-quantized: weight F8_E4M3 [N, K] with weight_scale per channel [N, 1] or per tensor [1].
TEST(HfQuant, Fp8ByHand) {
  const int N = 2, K = 32;
  std::vector<uint8_t> codes(N * K);
  for (int i = 0; i < N * K; ++i) codes[i] = static_cast<uint8_t>((i * 5) % 0x7E);
  const float per_channel[2] = {0.5f, 3.0f}, per_tensor[1] = {0.125f};
  for (int mode = 0; mode < 2; ++mode) {
    const std::string p = "model.layers.0.self_attn.q_proj";
    std::vector<TensorView> ts = {
        view(p + ".weight", DType::F8_E4M3, {N, K}, codes.data()),
        mode == 0 ? view(p + ".weight_scale", DType::F32, {N, 1}, per_channel)
                  : view(p + ".weight_scale", DType::F32, {1}, per_tensor),
        view("model.norm.weight", DType::F32, {2}, per_channel)};
    std::vector<std::vector<uint8_t>> owned;
    HfQuantConfig qc;
    qc.layout = HfQuantLayout::kFp8;
    ASSERT_TRUE(assemble_hf_quant(qc, ts, owned).is_ok());
    ASSERT_EQ(ts.size(), 2u);
    ASSERT_TRUE(find(ts, "model.norm.weight"));  // untouched
    const TensorView* w = find(ts, p + ".weight");
    ASSERT_TRUE(w);
    EXPECT_EQ(w->dtype, DType::FP8);
    const std::vector<float> y = dequant(*w);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        ASSERT_EQ(y[n * K + k], (mode == 0 ? per_channel[n] : per_tensor[0]) * e4m3_to_fp32(codes[n * K + k]));
  }
}

TEST(HfQuant, BadPartsAreNamed) {
  const std::string p = "model.layers.0.mlp.down_proj";
  std::vector<uint8_t> codes(64 * 2);
  const float scale3[3] = {1, 2, 3};
  HfQuantConfig fp8;
  fp8.layout = HfQuantLayout::kFp8;
  fp8.method = "fp8";
  std::vector<std::vector<uint8_t>> owned;
  std::vector<TensorView> ts = {view(p + ".weight", DType::F8_E4M3, {2, 64}, codes.data()),
                                view(p + ".weight_scale", DType::F32, {3}, scale3)};
  EXPECT_TRUE(fails_with(assemble_hf_quant(fp8, ts, owned), "weight_scale has 3 elements, expected 1"));
  ts = {view(p + ".weight", DType::F8_E4M3, {2, 64}, codes.data()), view(p + ".weight_scale", DType::F32, {1}, scale3),
        view(p + ".input_scale", DType::F32, {1}, scale3)};
  EXPECT_TRUE(fails_with(assemble_hf_quant(fp8, ts, owned), "static activation scales are not supported"));
  ts = {view("model.norm.weight", DType::F32, {3}, scale3)};
  EXPECT_TRUE(fails_with(assemble_hf_quant(fp8, ts, owned), "no tensor ends in \".weight_scale\""));
  HfQuantConfig awq;
  awq.layout = HfQuantLayout::kAwq;
  std::vector<int32_t> words(128);
  ts = {view(p + ".qweight", DType::I32, {128, 1}, words.data())};
  EXPECT_TRUE(fails_with(assemble_hf_quant(awq, ts, owned), "needs " + p + ".qzeros"));
}

}  // namespace
}  // namespace mopt
