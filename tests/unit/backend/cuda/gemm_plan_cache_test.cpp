// Gemm::import_plans / export_plans (backend/cuda/gemm_plan_cache.cpp): host code, runs without a GPU (a Gemm that
// was never init()ed touches no device). Records of every kind come back unchanged; a faulty record is refused
// whole. (The file around the records: tests/unit/backend/plan_cache_test.cpp; plans taken from a
// real warm-up: warmup_test.cpp, on a GPU.)
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"

namespace mopt {
namespace {

using cuda::Gemm;
using cuda::kMaxSkinnyVariants;
using cuda::WeightFormat;
constexpr int kAlgoBytes = static_cast<int>(sizeof(cublasLtMatmulAlgo_t));

// A fused record: m n k prologue epilogue y_f32 bias format variant ns, then the ranking padded with (0, -1).
PlanRecord fused(int m, WeightFormat fmt, int variant, std::vector<std::pair<int64_t, int64_t>> ranked) {
  PlanRecord r{"fused", {m, 4096, 4096, 1, 0, 0, 0, static_cast<int>(fmt), variant, 0}, {}};
  for (const auto& [ns, v] : ranked)
    if (v == variant) r.ints[9] = ns;
  for (int i = 0; i < kMaxSkinnyVariants; ++i) {
    const bool real = i < static_cast<int>(ranked.size());
    r.ints.push_back(real ? ranked[static_cast<size_t>(i)].first : 0);
    r.ints.push_back(real ? ranked[static_cast<size_t>(i)].second : -1);
  }
  return r;
}

PlanRecord fp8(int m, int64_t path) {
  PlanRecord r{"fp8", {m, 6144, 4096, 0, 11200, path}, std::vector<uint8_t>(kAlgoBytes)};
  for (int i = 0; i < kAlgoBytes; ++i) r.blob[static_cast<size_t>(i)] = static_cast<uint8_t>(7 * i + m);
  return r;
}

PlanRecord gemm(int m) {
  return {"gemm", {m, 4096, 4096, 0, 0, 16, 0, 0, 0, 9000}, std::vector<uint8_t>(kAlgoBytes, 3)};
}

std::vector<PlanRecord> sorted(std::vector<PlanRecord> v) {
  std::sort(v.begin(), v.end(), [](const PlanRecord& a, const PlanRecord& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.ints < b.ints;
  });
  return v;
}

TEST(GemmPlanRecords, EveryKindAndFormatComesBackUnchanged) {
  const std::vector<PlanRecord> in = {
      gemm(3),
      fused(1, WeightFormat::kFloat, 12, {{4100, 12}, {4200, 3}, {5000, 0}}),
      // The same shape in two formats: two plans.
      fused(1, WeightFormat::kNib4, 41, {{2100, 41}, {2150, 20}}),
      fused(8, WeightFormat::kInt8, 2, {{9000, 2}}),
      fp8(16, static_cast<int>(Gemm::Fp8Path::kTensorScaled)),
      fp8(64, static_cast<int>(Gemm::Fp8Path::kOuterVec)),
  };
  Gemm g;
  ASSERT_TRUE(g.import_plans(in).is_ok());
  EXPECT_EQ(g.n_from_cache(), 3u);  // the fused plans (the others count when their shape is first planned)
  EXPECT_EQ(sorted(g.export_plans()), sorted(in));
}

TEST(GemmPlanRecords, AFaultyRecordIsRefusedWhole) {
  const PlanRecord good = fused(2, WeightFormat::kNib4, 20, {{3000, 20}, {3100, 41}});
  std::vector<std::pair<std::string, PlanRecord>> bad;
  // base with ints[index] = value for each (index, value)
  auto with = [&](const char* what, std::vector<std::pair<int, int64_t>> edits, const PlanRecord& base) {
    PlanRecord r = base;
    for (const auto& [index, value] : edits) r.ints[static_cast<size_t>(index)] = value;
    bad.emplace_back(what, r);
  };
  // Ranked pairs start at ints[10]: pair i is (ints[10 + 2i], ints[11 + 2i]).
  with("format out of range", {{7, 4}}, good);
  with("variant beyond the format's tilings", {{8, cuda::skinny_variants(WeightFormat::kFloat)}},
       fused(2, WeightFormat::kFloat, 0, {{10, 0}}));
  with("variant not among the ranked ones", {{8, 3}}, good);
  with("a tiling ranked twice", {{13, 20}}, good);
  with("slower ranked first", {{10, 3200}}, good);
  with("a tiling after the padding", {{16, 3300}, {17, 44}}, good);
  with("negative time", {{12, -5}}, good);
  with("a tiling with no time", {{12, 0}}, good);
  with("no tiling ran", {{10, 0}, {11, -1}}, fused(2, WeightFormat::kNib4, 20, {{3000, 20}}));
  with("m beyond the skinny rows", {{0, cuda::kSkinnyMaxRows + 1}}, good);
  with("unknown FP8 way", {{5, 0}}, fp8(16, 2));
  with("FP8 time 0", {{4, 0}}, fp8(16, 2));
  {
    PlanRecord r = fp8(16, 2);
    r.blob.pop_back();
    bad.emplace_back("short algorithm blob", r);
  }
  {
    PlanRecord r = good;
    r.ints.pop_back();
    bad.emplace_back("short fused record", r);
  }
  for (const auto& [what, r] : bad) {
    SCOPED_TRACE(what);
    Gemm g;
    const std::vector<PlanRecord> recs = {gemm(3), r};
    const Status st = g.import_plans(recs);
    ASSERT_FALSE(st.is_ok());
    const std::string msg = st.message();
    EXPECT_NE(msg.find("plan cache"), std::string::npos) << msg;
    // Nothing imported: not even the valid record before it.
    EXPECT_TRUE(g.export_plans().empty());
    EXPECT_EQ(g.n_from_cache(), 0u);
  }
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
