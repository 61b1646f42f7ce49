// Round trips of every format mopt quantize writes, on a generated random-weight Llama (Hugging Face folder, bf16):
// the output reloads through mopt's loaders; each weight dequantizes to within its format's error bound of the
// original (GGUF Q/K rows in the GGUF RoPE pairing); the GGUF tensor types are the documented mix; matmul on the
// reloaded weights equals the fp64 product of the dequantized weights; the tokenizer and chat template carry over;
// the logits stay close to the original's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "quant/gguf_meta.h"
#include "quant/quantize.h"
#include "tokenizer/tokenizer.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

using quant::Target;

class QuantRoundTrip : public ::testing::TestWithParam<Target> {
 public:
  static void SetUpTestSuite() {
    // One folder per process, made afresh by each instantiation of the suite (a binary run as a whole sets up
    // several in one process).
    test::make_tiny_llama_suite("roundtrip", dir_);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_;
};
std::string QuantRoundTrip::dir_;

// Relative RMS error bounds of a round trip through each type on Gaussian data (tests/unit/core/formats_test.cpp
// measures them; these leave headroom).
double rms_bound(DType t) {
  switch (t) {
    case DType::BF16: return 0.0;
    case DType::F16: return 0.001;  // AWQ outputs' float tensors (bf16 values below fp16's normal range round)
    case DType::Q8_0: return 0.01;
    case DType::Q4_0: return 0.15;
    case DType::Q4_K: return 0.11;
    case DType::Q5_K: return 0.055;
    case DType::Q6_K: return 0.03;
    case DType::Q5_0: return 0.075;
    case DType::Q5_1: return 0.055;
    case DType::FP8: return 0.035;
    case DType::INT8: return 0.012;
    case DType::INT4_G128: return 0.13;
    default: return -1.0;
  }
}

std::vector<float> dequant(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  dequantize_row_ref(t.dtype, t.data, out.data(), t.n_elements());
  return out;
}

TEST_P(QuantRoundTrip, ReloadsWithinBounds) {
  const Target target = GetParam();
  const quant::TargetInfo& ti = quant::target_info(target);
  quant::QuantizeOptions o;
  o.input = dir_ + "/llama";
  o.output = dir_ + "/out." + ti.name;
  o.target = target;
  o.method = quant::Method::kRtn;
  o.force = true;
  o.threads = 2;
  auto rep = quant::quantize_model(o);
  ASSERT_TRUE(rep) << rep.message();
  auto orig = load_model(o.input);
  auto got = load_model(o.output);
  ASSERT_TRUE(orig && got) << got.message();
  const Model& a = **orig;
  const Model& b = **got;
  EXPECT_EQ(b.format, ti.gguf ? ModelFormat::kGGUF : ModelFormat::kHuggingFace);
  EXPECT_EQ(b.config.n_layer, a.config.n_layer);
  EXPECT_EQ(b.config.head_dim, a.config.head_dim);
  EXPECT_EQ(b.config.rope_theta, a.config.rope_theta);

  // Weights, tensor by tensor.
  int checked = 0;
  for (const TensorSpec& s : expected_tensors(a.config)) {
    const TensorView* ta = a.find(s.name);
    const TensorView* tb = b.find(s.name);
    ASSERT_TRUE(ta && tb) << s.name;
    const std::vector<float> x = dequant(*ta), y = dequant(*tb);
    const int64_t k = ta->ne[0], rows = ta->rows();
    const std::vector<int64_t> perm =
        ti.gguf ? quant::gguf_row_order(a.config, a.config.rope_style, s.name, s.n_dims == 1 ? k : rows)
                : std::vector<int64_t>{};
    double se = 0, sx = 0;
    for (int64_t i = 0; i < rows * k; ++i) {
      int64_t src = i;
      if (!perm.empty()) src = s.n_dims == 1 ? perm[static_cast<size_t>(i)] : perm[static_cast<size_t>(i / k)] * k + i % k;
      const double e = static_cast<double>(y[static_cast<size_t>(i)]) - x[static_cast<size_t>(src)];
      se += e * e, sx += static_cast<double>(x[static_cast<size_t>(src)]) * x[static_cast<size_t>(src)];
    }
    const double bound = s.n_dims == 1 ? 0.0 : rms_bound(tb->dtype);
    ASSERT_GE(bound, 0.0) << s.name << " has type " << dtype_name(tb->dtype);
    EXPECT_LE(std::sqrt(se / sx), bound) << s.name << " " << dtype_name(tb->dtype);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(expected_tensors(a.config).size()));

  // GGUF: the documented mix (2 layers: use_more_bits picks layer 1; ffn_down rows of 640 fall back).
  if (ti.gguf) {
    auto g = gguf::File::open(o.output);
    ASSERT_TRUE(g);
    EXPECT_EQ((*g)->get_int("general.file_type"), static_cast<int64_t>(ti.llama_ftype));
    auto type_of = [&](const char* n) { return (*g)->find_tensor(n)->view.dtype; };
    if (target == Target::kQ4_K_M) {
      EXPECT_EQ(type_of("blk.0.attn_v.weight"), DType::Q4_K);
      EXPECT_EQ(type_of("blk.1.attn_v.weight"), DType::Q6_K);
      EXPECT_EQ(type_of("blk.0.ffn_down.weight"), DType::Q5_0);
      EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::Q8_0);
      EXPECT_EQ(type_of("output.weight"), DType::Q6_K);
      EXPECT_EQ(type_of("token_embd.weight"), DType::Q4_K);
      EXPECT_EQ(type_of("blk.1.attn_norm.weight"), DType::F32);
    }
    if (target == Target::kQ5_K_M) {
      EXPECT_EQ(type_of("blk.0.attn_q.weight"), DType::Q5_K);
      EXPECT_EQ(type_of("blk.0.ffn_down.weight"), DType::Q5_1);
      EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::Q8_0);
    }
    for (const gguf::TensorInfo& t : (*g)->tensors())
      EXPECT_EQ(t.view.dtype, quant::gguf_tensor_type(target, a.config, true, t.view.name, t.view.n_dims,
                                                      t.view.ne[0])) << t.view.name;
  }

  // matmul on a reloaded weight equals the fp64 product of its dequantized values with the activations as its
  // kernels quantize them (ffn_down: the fallback types of the GGUF mixes).
  {
    const TensorView& w = *b.find("blk.0.ffn_down.weight");
    const int64_t K = w.ne[0], N = w.ne[1], M = 3;
    std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 1.5f;
    ASSERT_TRUE(cpu::matmul_supports(w.dtype, K)) << dtype_name(w.dtype);
    cpu::matmul(w, x.data(), M, y.data(), nullptr);
    const std::vector<float> wd = dequant(w);
    const DType at = *dtype_traits(w.dtype).vec_dot_type;
    std::vector<float> xq = x;
    if (at != DType::F32) {
      std::vector<uint8_t> buf(*row_bytes(at, static_cast<uint64_t>(K)));
      for (int64_t m = 0; m < M; ++m) {
        cpu::quantize_row(at, x.data() + m * K, buf.data(), K);
        cpu::dequantize_row(at, buf.data(), xq.data() + m * K, K);
      }
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(wd[static_cast<size_t>(n * K + k)]) * xq[static_cast<size_t>(m * K + k)];
          ref += p, mag += std::fabs(p);
        }
        ASSERT_NEAR(y[static_cast<size_t>(m * N + n)], ref, 2e-5 * mag + 1e-6) << m << " " << n;
      }
  }

  // Tokenizer and chat template.
  EXPECT_EQ(b.vocab.tokens, a.vocab.tokens);
  EXPECT_EQ(b.vocab.eos, a.vocab.eos);
  EXPECT_EQ(b.chat_template, a.chat_template);
  EXPECT_FALSE(b.chat_template.empty());
  auto tok_a = Tokenizer::create(a.vocab);
  auto tok_b = Tokenizer::create(b.vocab);
  ASSERT_TRUE(tok_a && tok_b);
  const std::string text = "def main():\n    print(\"héllo, wörld\")  # 123 + 4.5\n<|im_start|>user";
  const std::vector<int32_t> ids = (*tok_a)->encode(text, false, true);
  EXPECT_EQ((*tok_b)->encode(text, false, true), ids);

  // Logits over the tokens: relative RMS error against the original's spread.
  const std::vector<float> la = test::logits_of(a, ids), lb = test::logits_of(b, ids);
  ASSERT_EQ(la.size(), lb.size());
  double se = 0, sv = 0, mean = 0;
  for (float v : la) mean += v / static_cast<double>(la.size());
  for (size_t i = 0; i < la.size(); ++i) se += std::pow(lb[i] - la[i], 2), sv += std::pow(la[i] - mean, 2);
  // 8-bit weights: < 0.05 (fp8 also rounds activations to E4M3 per token: < 0.1); 4-bit: < 0.3.
  const double bound = target == Target::kFp8 ? 0.1 : target == Target::kQ8_0 || target == Target::kInt8 ? 0.05 : 0.3;
  std::printf("%s logits rel rms %.4f\n", ti.name, std::sqrt(se / sv));
  EXPECT_LT(std::sqrt(se / sv), bound) << ti.name;
}

// --fp8-scale tensor: one weight_scale per layer ([1]) holding max |W| / 448; the weights reload within FP8's bound.
TEST_F(QuantRoundTrip, Fp8PerTensorScale) {
  quant::QuantizeOptions o;
  o.input = dir_ + "/llama";
  o.output = dir_ + "/out.fp8-tensor";
  o.target = Target::kFp8;
  o.fp8_per_tensor = true;
  o.force = true;
  ASSERT_TRUE(quant::quantize_model(o));
  auto st = safetensors::open_file(o.output + "/model.safetensors");
  ASSERT_TRUE(st);
  int scales = 0;
  for (const TensorView& t : st->tensors)
    if (t.name.find("weight_scale") != std::string::npos) {
      EXPECT_EQ(t.n_elements(), 1) << t.name;
      ++scales;
    }
  EXPECT_EQ(scales, 14);  // 7 linear layers x 2 blocks
  auto orig = load_model(o.input);
  auto got = load_model(o.output);
  ASSERT_TRUE(orig && got) << got.message();
  const TensorView& w = *(*got)->find("blk.1.ffn_up.weight");
  const std::vector<float> x = dequant(*(*orig)->find("blk.1.ffn_up.weight")), y = dequant(w);
  double se = 0, sx = 0, amax = 0;
  for (size_t i = 0; i < x.size(); ++i) se += std::pow(y[i] - x[i], 2), sx += std::pow(x[i], 2), amax = std::max(amax, std::fabs(double(x[i])));
  EXPECT_LT(std::sqrt(se / sx), rms_bound(DType::FP8));
  for (int64_t b = 0; b < w.n_elements() / kQKRow; ++b)
    ASSERT_EQ(static_cast<const BlockFP8*>(w.data)[b].d, static_cast<float>(amax) / kE4M3Max);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, QuantRoundTrip,
                         ::testing::Values(Target::kQ8_0, Target::kQ4_0, Target::kQ4_K_M, Target::kQ5_K_M,
                                           Target::kQ6_K, Target::kFp8, Target::kInt8, Target::kAwq),
                         [](const auto& info) { return std::string(quant::target_info(info.param).name); });

}  // namespace
}  // namespace mopt
