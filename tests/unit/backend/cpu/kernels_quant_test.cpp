// The CPU's vectorized row conversions (the activation quantizers, fp16 rows) against their definitions and the
// dtype table's reference conversions, and dequantize_row against the tests' own oracle. The formats themselves are
// tested in tests/unit/core/formats_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/formats.h"
#include "backend/cpu/quant.h"
#include "core/dtype.h"
#include "kernels_test_util.h"
#include "unit/backend/dequant_oracle.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;

TEST(KernelsQuant, Q8_KBlockSums) {
  auto x = random_vec(512, 3);
  BlockQ8_K b[2];
  quantize_row(DType::Q8_K, x.data(), b, 512);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b[i].qs[16 * k + j];
      EXPECT_EQ(b[i].bsums[k], s);
    }
}

// The activation quantizers (vectorized) against their definition: d = max|x| / 127, q = round-half-even(x / d)
// (as x * (1/d)); Q8_0 stores d as fp16.
TEST(KernelsQuant, ActivationQuantizersMatchDefinition) {
  auto x = random_vec(256 * 5, 21, 4.0f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero Q8_0 block
  x[300] = 1e-30f;
  std::vector<BlockQ8_K> bk(5);
  std::vector<BlockQ8_0> b0(40);
  quantize_row(DType::Q8_K, x.data(), bk.data(), 256 * 5);
  quantize_row(DType::Q8_0, x.data(), b0.data(), 256 * 5);
  for (int blk = 0; blk < 5; ++blk) {
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[blk * 256 + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    ASSERT_EQ(bk[blk].d, d);
    for (int j = 0; j < 256; ++j)
      ASSERT_EQ(bk[blk].qs[j], static_cast<int>(std::nearbyint(x[blk * 256 + j] * id))) << blk << " " << j;
  }
  for (int blk = 0; blk < 40; ++blk) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[blk * 32 + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    ASSERT_EQ(b0[blk].d, fp32_to_fp16(d));
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(b0[blk].qs[j], static_cast<int>(std::nearbyint(x[blk * 32 + j] * id))) << blk << " " << j;
  }
}

#if defined(__F16C__)
// The CPU's own conversion (F16C, IEEE round-to-nearest-even) as the independent reference.
TEST(KernelsQuant, Fp16MatchesHardware) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Concentrate on the fp16 range (exponents 100..145) where rounding matters.
    u = (u & 0x807FFFFFu) | ((100u + (u >> 23) % 46u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float f : xs) {
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    ASSERT_EQ(fp32_to_fp16(f), hw) << f;
    ASSERT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(hw)), std::bit_cast<uint32_t>(_cvtsh_ss(hw)));
  }
  std::vector<uint16_t> rows(xs.size());
  fp32_to_fp16_row(xs.data(), rows.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(rows[i], fp32_to_fp16(xs[i]));
}
#endif

// Every vectorized conversion the CPU format table registers gives the bits of its dtype row's reference
// conversion (the CPU quantizes activations and converts fp16 with them): data with an all-zero block, a tiny value
// and large magnitudes; element types get an odd length (the scalar tail).
TEST(KernelsQuant, RegisteredConversionsMatchReference) {
  int checked = 0;
  for (const DTypeTraits& r : dtype_table()) {
    const CpuFormat& f = cpu_format(r.type);
    if (!f.to_float && !f.from_float) continue;
    const int64_t n = r.block_elems == 1 ? 1003 : 8 * r.block_elems;
    auto x = random_vec(static_cast<size_t>(n), 11, 100.0f);
    for (int64_t i = 0; i < r.block_elems && r.block_elems > 1; ++i) x[static_cast<size_t>(i)] = 0.0f;
    x[static_cast<size_t>(n - 1)] = 1e-30f;
    const uint64_t bytes = *row_bytes(r.type, static_cast<uint64_t>(n));
    std::vector<uint8_t> ref(bytes), fast(bytes, 0xAB);
    quantize_row_ref(r.type, x.data(), ref.data(), n);
    if (f.from_float) {
      f.from_float(x.data(), fast.data(), n);
      ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), bytes)) << r.name << " from_float";
      ++checked;
    }
    if (f.to_float) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), -1.0f);
      dequantize_row_ref(r.type, ref.data(), a.data(), n);
      f.to_float(ref.data(), b.data(), n);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), static_cast<size_t>(n) * 4)) << r.name << " to_float";
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // f16 both ways, the Q8_0 and Q8_K activation quantizers
}

// dequantize_row (a type's registered conversion or the dtype table's reference) and the reference itself against the
// tests' oracle (unit/backend/dequant_oracle.h, written from the format definitions), on rows quantize_row made from
// weights with uneven magnitudes: the same float for every element (every format's products of an fp16 scale, a small
// integer scale and a quant fit in 25 bits, so one rounding of the exact value, as the oracle does, is what a correct
// float evaluation gives).
TEST(KernelsQuant, DequantizeRowMatchesOracle) {
  const int64_t K = 1024;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                  DType::Q8_K}) {
    const auto w = kernels_test::random_weights(K, 21);
    std::vector<uint8_t> q(*row_bytes(t, K));
    quantize_row(t, w.data(), q.data(), K);
    std::vector<float> got(K), ref(K), want(K);
    dequantize_row(t, q.data(), got.data(), K);
    dequantize_row_ref(t, q.data(), ref.data(), K);
    test::oracle::dequantize(t, q.data(), want.data(), K);
    for (int64_t i = 0; i < K; ++i) {
      ASSERT_EQ(got[i], want[i]) << dtype_name(t) << " element " << i << ": dequantize_row";
      ASSERT_EQ(ref[i], want[i]) << dtype_name(t) << " element " << i << ": dequantize_row_ref";
    }
  }
}

}  // namespace
}  // namespace mopt::cpu
