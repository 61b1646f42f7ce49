// The fp8 KV cache's host parts: the E4M3 oracle the GPU tests use (against values from the format's
// definition), the per-head scale rule (backend/kv_fp8.h), and the CPU runner's refusal of an fp8 cache.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/kv_fp8.h"
#include "model_util.h"
#include "unit/backend/e4m3_ref.h"

namespace mopt {
namespace {

TEST(E4m3Reference, DecodesTheFormatsLandmarks) {
  EXPECT_EQ(e4m3ref::decode(0x00), 0.f);
  EXPECT_EQ(e4m3ref::decode(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3ref::decode(0x07), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3ref::decode(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(e4m3ref::decode(0x38), 1.f);
  EXPECT_EQ(e4m3ref::decode(0x39), 1.125f);
  EXPECT_EQ(e4m3ref::decode(0x7E), 448.f);
  EXPECT_EQ(e4m3ref::decode(0xBE), -1.75f);  // sign | e 7 | m 6
  EXPECT_TRUE(std::isnan(e4m3ref::decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3ref::decode(0xFF)));
}

TEST(E4m3Reference, RoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 0x7F; ++c) {  // every finite code round-trips, both signs
    EXPECT_EQ(e4m3ref::encode(e4m3ref::decode(static_cast<uint8_t>(c))), c);
    EXPECT_EQ(e4m3ref::encode(-e4m3ref::decode(static_cast<uint8_t>(c))), c | 0x80);
  }
  EXPECT_EQ(e4m3ref::encode(1.0625f), 0x38);   // tie between 1 (0x38) and 1.125 (0x39): even
  EXPECT_EQ(e4m3ref::encode(1.1875f), 0x3A);   // tie between 1.125 and 1.25 (0x3A): even
  EXPECT_EQ(e4m3ref::encode(1.07f), 0x39);
  EXPECT_EQ(e4m3ref::encode(std::ldexp(1.f, -10)), 0x00);       // half the smallest subnormal: tie to 0
  EXPECT_EQ(e4m3ref::encode(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(e4m3ref::encode(460.f), 0x7E);     // above 448: saturates
  EXPECT_EQ(e4m3ref::encode(1e9f), 0x7E);
  EXPECT_EQ(e4m3ref::encode(-1e9f), 0xFE);
  EXPECT_EQ(e4m3ref::encode(INFINITY), 0x7E);
  EXPECT_EQ(e4m3ref::encode(NAN), 0x7F);
  // Relative error of a normal value: at most half a mantissa step, 2^-4.
  for (float x = 0.02f; x < 440.f; x *= 1.013f)
    EXPECT_LE(std::fabs(e4m3ref::decode(e4m3ref::encode(x)) - x), x / 16 * 1.0001f) << x;
}

// encode() against an exhaustive nearest-code search (ties to the even code) on random magnitudes 2^-12 .. 2^10.
TEST(E4m3Reference, EncodeIsTheNearestCode) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> exp2(-12, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(std::exp2(exp2(rng))) * (i % 2 ? -1.f : 1.f);
    int best = 0;
    for (int c = 1; c <= 0x7E; ++c) {
      const double dc = std::fabs(std::fabs(x) - e4m3ref::decode(static_cast<uint8_t>(c)));
      const double db = std::fabs(std::fabs(x) - e4m3ref::decode(static_cast<uint8_t>(best)));
      if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    ASSERT_EQ(e4m3ref::encode(x), (x < 0 ? 0x80 : 0) | best) << x;
  }
}

TEST(Fp8KvScales, PerHeadBoundOver448) {
  // 2 heads of 4 dims; K rows then V rows.
  const std::vector<float> b = {1, 2, 3, 4, 0, 0, 0, 0,     // K: head 0 max 4, head 1 all zero
                                10, 1, 1, 1, 0.5f, 7, 1, 1};  // V: head 0 max 10, head 1 max 7
  auto s = fp8_kv_head_scales(b, 2, 4, /*rope=*/false, -1.f);
  ASSERT_TRUE(s) << s.message();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_FLOAT_EQ((*s)[0], 4 * kFp8KvScaleMargin / 448);
  EXPECT_EQ((*s)[1], 1.f);  // a zero head: any positive scale
  EXPECT_FLOAT_EQ((*s)[2], 10 * kFp8KvScaleMargin / 448);
  EXPECT_FLOAT_EQ((*s)[3], 7 * kFp8KvScaleMargin / 448);
  // RoPE mixes pairs of K dims: sqrt(2) more room for K only.
  auto r = fp8_kv_head_scales(b, 2, 4, /*rope=*/true, -1.f);
  ASSERT_TRUE(r);
  EXPECT_FLOAT_EQ((*r)[0], 4 * std::sqrt(2.f) * kFp8KvScaleMargin / 448);
  EXPECT_FLOAT_EQ((*r)[2], (*s)[2]);
  // Qwen3 k-norm: |K_d| <= sqrt(head_dim) * max |k_norm|, whatever the rows say.
  auto q = fp8_kv_head_scales(b, 2, 4, /*rope=*/false, 0.5f);
  ASSERT_TRUE(q);
  EXPECT_FLOAT_EQ((*q)[0], 2 * 0.5f * kFp8KvScaleMargin / 448);
  EXPECT_FLOAT_EQ((*q)[1], (*q)[0]);
}

TEST(Fp8KvScales, RefusesBadInput) {
  std::vector<float> b(16, 1.f);
  EXPECT_FALSE(fp8_kv_head_scales(b, 2, 3, false, -1.f));  // size mismatch
  b[9] = NAN;
  EXPECT_FALSE(fp8_kv_head_scales(b, 2, 4, false, -1.f));
  b[9] = INFINITY;
  EXPECT_FALSE(fp8_kv_head_scales(b, 2, 4, false, -1.f));
}

TEST(Fp8KvScales, CpuRunnerRefusesAnFp8Cache) {
  auto m = load_model(test::models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m) << m.message();
  RunnerOptions o;
  o.n_threads = 1;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  auto r = CpuRunner::create(**m, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("--kv-cache-dtype fp8"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace mopt
