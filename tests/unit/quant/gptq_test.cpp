// GPTQ (quant/gptq.h) on the generated Llama: its output error on each linear layer's calibration inputs is below
// round-to-nearest's in every format it writes, with and without act-order; the files `mopt quantize --method gptq`
// writes reload, and their weights dequantize to exactly the values GPTQ chose (the writers pass the codes and
// scales through); the grid's bytes dequantize to the values round() returned.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "quant/calib_text.h"
#include "quant/calibration.h"
#include "quant/convert.h"
#include "quant/gguf_meta.h"
#include "quant/gptq.h"
#include "quant/quantize.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

class QuantGptq : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    test::make_tiny_llama_suite("gptq", src_);
  }
  static std::string src_;
};
std::string QuantGptq::src_;

// |X W^T - X Q^T|^2 over the rows of x [T, K] for w, q [N, K].
double output_error(const std::vector<float>& x, int64_t T, int64_t K, const std::vector<float>& w,
                    const std::vector<float>& q, int64_t N, ThreadPool& pool) {
  std::vector<float> d(w.size());
  for (size_t i = 0; i < w.size(); ++i) d[i] = w[i] - q[i];
  std::vector<float> y(static_cast<size_t>(T * N));
  cpu::matmul_raw(DType::F32, d.data(), N, K, x.data(), T, y.data(), &pool);
  double e = 0;
  for (float v : y) e += static_cast<double>(v) * v;
  return e;
}

// w [N, K] through type's round-to-nearest conversion (INT8: one scale per row, max |w| / 127).
std::vector<float> round_to_nearest(const std::vector<float>& w, int64_t N, int64_t K, DType type) {
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(K));
  std::vector<uint8_t> row(rb);
  std::vector<float> q(w.size());
  for (int64_t n = 0; n < N; ++n) {
    cpu::quantize_row(type, w.data() + n * K, row.data(), K);
    cpu::dequantize_row(type, row.data(), q.data() + n * K, K);
  }
  return q;
}

TEST_F(QuantGptq, LayerOutputErrorBelowRoundToNearest) {
  auto m = load_model(src_ + "/llama");
  ASSERT_TRUE(m) << m.message();
  ThreadPool pool(2);
  auto seqs = quant::calibration_sequences(**m, quant::kDefaultCalibText,
                                           "(the bundled sample)", "GPTQ");
  ASSERT_TRUE(seqs) << seqs.message();
  quant::CalibrationForward fwd(**m, std::move(*seqs), pool);
  const quant::LayerInputs in = fwd.run_layer(0);
  const std::pair<const char*, const std::vector<float>*> linears[] = {
      {"blk.0.attn_q.weight", &in.attn}, {"blk.0.attn_v.weight", &in.attn}, {"blk.0.attn_output.weight", &in.out},
      {"blk.0.ffn_up.weight", &in.mlp},  {"blk.0.ffn_down.weight", &in.down}};
  cpu::PackedF32 packed;
  for (const auto& [name, x] : linears) {
    const TensorView& t = *(*m)->find(name);
    const int64_t N = t.rows(), K = t.ne[0], T = in.T;
    const std::vector<float> w = quant::to_f32(t, pool);
    std::vector<float> h(static_cast<size_t>(K * K));
    quant::column_gram(x->data(), T, K, 0, K, nullptr, h.data(), packed, pool);
    for (DType type : {DType::Q8_0, DType::INT8, DType::Q4_0, DType::INT4_G128}) {
      if (K % dtype_traits(type).block_elems != 0) continue;
      const double e_rtn = output_error(*x, T, K, w, round_to_nearest(w, N, K, type), N, pool);
      for (bool act_order : {false, true}) {
        quant::WeightGrid grid(type, N, K);
        std::vector<float> q = w;
        quant::GptqOptions o;
        o.act_order = act_order;
        ASSERT_TRUE(quant::gptq_quantize(q.data(), N, K, h, grid, o, pool).is_ok());
        const double e_gptq = output_error(*x, T, K, w, q, N, pool);
        std::printf("%-26s %-9s act-order %d: output error gptq / rtn = %.3f\n", name, dtype_name(type), act_order,
                    e_gptq / e_rtn);
        EXPECT_LT(e_gptq, e_rtn) << name << " " << dtype_name(type) << " act_order " << act_order;
        // The grid's bytes are the values GPTQ left in q.
        std::vector<float> back(q.size());
        const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(K));
        for (int64_t n = 0; n < N; ++n)
          cpu::dequantize_row(type, grid.bytes().data() + static_cast<uint64_t>(n) * rb, back.data() + n * K, K);
        EXPECT_EQ(back, q) << name << " " << dtype_name(type);
      }
    }
  }
}

// GPTQ against its definition on a small problem: for each column i in order, round w_i, then w_j -= (w_i - q_i) /
// Hi[0][0] Hi[0][j - i] for j > i, Hi being the inverse of the dampened H restricted to columns i.. (explicit
// inverses in fp64, no Cholesky, no lazy batches). INT8 (scales from the original rows) so the grids are the same.
TEST(QuantGptqDefinition, MatchesExplicitInverses) {
  constexpr int64_t N = 8, K = 160, T = 400;  // K > 128: two lazy blocks
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(T * K)), w(static_cast<size_t>(N * K));
  for (float& v : x) v = nd(rng);
  for (int64_t t = 0; t < T; ++t)  // correlated inputs: each input leaks into the next
    for (int64_t k = 1; k < K; ++k) x[static_cast<size_t>(t * K + k)] += 0.8f * x[static_cast<size_t>(t * K + k - 1)];
  for (float& v : w) v = nd(rng);
  ThreadPool pool(2);
  cpu::PackedF32 packed;
  std::vector<float> h(static_cast<size_t>(K * K));
  quant::column_gram(x.data(), T, K, 0, K, nullptr, h.data(), packed, pool);
  double mean = 0;
  for (int64_t k = 0; k < K; ++k) mean += h[static_cast<size_t>(k * K + k)] / K;
  quant::WeightGrid grid(DType::INT8, N, K), ref_grid(DType::INT8, N, K);
  std::vector<float> q = w;
  const quant::GptqOptions opt;
  ASSERT_TRUE(quant::gptq_quantize(q.data(), N, K, h, grid, opt, pool).is_ok());
  int64_t differ = 0;
  for (int64_t n = 0; n < N; ++n) {
    ref_grid.set_scale(n, 0, w.data() + n * K);
    std::vector<double> wr(w.begin() + n * K, w.begin() + (n + 1) * K);
    for (int64_t i = 0; i < K; ++i) {
      const int64_t m = K - i;  // Hi = inverse of H[i:, i:] + damp I by Gauss-Jordan
      std::vector<double> a(static_cast<size_t>(m * 2 * m), 0.0);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < m; ++c)
          a[static_cast<size_t>(r * 2 * m + c)] =
              h[static_cast<size_t>((i + r) * K + i + c)] + (r == c ? opt.damp * mean : 0);
        a[static_cast<size_t>(r * 2 * m + m + r)] = 1.0;
      }
      for (int64_t c = 0; c < m; ++c) {
        const double piv = a[static_cast<size_t>(c * 2 * m + c)];
        for (int64_t j = 0; j < 2 * m; ++j) a[static_cast<size_t>(c * 2 * m + j)] /= piv;
        for (int64_t r = 0; r < m; ++r)
          if (r != c) {
            const double f = a[static_cast<size_t>(r * 2 * m + c)];
            for (int64_t j = 0; j < 2 * m; ++j)
              a[static_cast<size_t>(r * 2 * m + j)] -= f * a[static_cast<size_t>(c * 2 * m + j)];
          }
      }
      const double qi = ref_grid.round(n, i, static_cast<float>(wr[static_cast<size_t>(i)]));
      const double e = (wr[static_cast<size_t>(i)] - qi) / a[static_cast<size_t>(m)];
      for (int64_t j = 1; j < m; ++j) wr[static_cast<size_t>(i + j)] -= e * a[static_cast<size_t>(m + j)];
      wr[static_cast<size_t>(i)] = qi;
      differ += static_cast<float>(qi) != q[static_cast<size_t>(n * K + i)];
    }
  }
  // Rounding differences (fp32 against fp64) may move a weight that sits at a midpoint to the other code.
  EXPECT_LE(differ, N * K / 100) << "of " << N * K;
  std::printf("GPTQ against explicit inverses: %lld of %lld codes differ\n", (long long)differ, (long long)(N * K));
}

// Quantizes the generated Llama with --method gptq to `target`, recording GPTQ's values of every linear layer, and
// checks that the output reloads with each linear layer in `type`, dequantizing to exactly those values.
void check_written_codes(const std::string& src, quant::Target target, DType type, bool act_order) {
  std::map<std::string, std::vector<float>> chosen;
  quant::set_gptq_observer([&](const std::string& name, const float* w, int64_t N, int64_t K) {
    chosen[name].assign(w, w + N * K);
  });
  const bool gguf = quant::target_info(target).gguf;
  quant::QuantizeOptions o;
  o.input = src + "/llama";
  o.output = test::scratch_dir() + "/" + quant::target_info(target).name + (gguf ? ".gguf" : "");
  o.target = target;
  o.method = quant::Method::kGptq;
  o.act_order = act_order;
  o.threads = 2;
  auto rep = quant::quantize_model(o);
  quant::set_gptq_observer({});
  ASSERT_TRUE(rep) << rep.message();
  auto m = load_model(o.output);
  auto orig = load_model(o.input);
  ASSERT_TRUE(m && orig) << m.message();
  const ModelConfig& c = (*orig)->config;
  EXPECT_EQ(chosen.size(), static_cast<size_t>(7 * c.n_layer));
  ThreadPool pool(2);
  for (const auto& [name, want] : chosen) {
    const TensorView* t = (*m)->find(name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->dtype, type) << name;
    // GGUF files of the llama architecture hold attn_q / attn_k rows in their RoPE pairing (gguf_meta.h).
    const std::vector<int64_t> perm =
        gguf ? quant::gguf_row_order(c, c.rope_style, name, t->rows()) : std::vector<int64_t>{};
    const std::vector<float> got = quant::to_f32(*t, pool);
    const int64_t K = t->ne[0];
    int64_t mismatches = 0;
    for (int64_t r = 0; r < t->rows(); ++r) {
      const int64_t from = perm.empty() ? r : perm[static_cast<size_t>(r)];
      for (int64_t k = 0; k < K; ++k)
        mismatches += got[static_cast<size_t>(r * K + k)] != want[static_cast<size_t>(from * K + k)];
    }
    EXPECT_EQ(mismatches, 0) << name << " in " << quant::target_info(target).name;
  }
}

TEST_F(QuantGptq, WrittenWeightsAreGptqsValues) {
  check_written_codes(src_, quant::Target::kInt8, DType::INT8, false);
  check_written_codes(src_, quant::Target::kQ8_0, DType::Q8_0, false);
  check_written_codes(src_, quant::Target::kQ4_0, DType::Q4_0, true);
  check_written_codes(src_, quant::Target::kAwq, DType::INT4_G128, false);
}

}  // namespace
}  // namespace mopt
