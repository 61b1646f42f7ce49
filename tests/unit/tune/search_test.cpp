#include "tune/search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tune/report.h"
#include "tune/space.h"

namespace mopt::tune {
namespace {

SearchSpace three_dims() {
  SearchSpace sp;
  sp.dims = {{Knob::kMaxNumSeqs, {1, 2, 4, 8, 16, 32, 64}, true, 6},
             {Knob::kMaxNumBatchedTokens, {256, 512, 1024, 2048, 4096}, true, 3},
             {Knob::kPrefixCaching, {1, 0}, false, 0}};
  return sp;
}

TEST(Search, BetterRanksFeasibleThenGoodputThenExcess) {
  const Score crashed{false, false, 0, 0}, missed{true, false, 50, 1.4}, missed_less{true, false, 10, 1.1},
      met{true, true, 10, 0.8}, met_more{true, true, 10.5, 0.9};
  EXPECT_TRUE(better(missed, crashed, 0));
  EXPECT_TRUE(better(met, missed, 0.03));
  EXPECT_TRUE(better(missed_less, missed, 0.03)) << "closer to the SLA wins among misses";
  EXPECT_TRUE(better(met_more, met, 0.03)) << "+5% clears a 3% margin";
  EXPECT_FALSE(better(met_more, met, 0.06)) << "but not a 6% one";
  EXPECT_FALSE(better(met, met_more, 0)) << "less goodput is never better";
  EXPECT_FALSE(better(crashed, crashed, 0));
}

// A separable objective with its optimum at seqs=8, mbt=1024, prefix caching off: the search reaches it from the
// seed, measures no point twice, and converges.
TEST(Search, FindsTheOptimumOfAUnimodalObjective) {
  const SearchSpace sp = three_dims();
  std::set<std::vector<int>> measured;
  int calls = 0;
  auto eval = [&](const std::vector<int>& p) -> std::optional<Score> {
    ++calls;
    EXPECT_TRUE(measured.insert(p).second) << "a point was measured twice";
    const Settings s = sp.at(p);
    const double g = 100 - 3 * std::pow(std::log2(s[Knob::kMaxNumSeqs]) - 3, 2) -
                     2 * std::pow(std::log2(s[Knob::kMaxNumBatchedTokens]) - 10, 2) - (s[Knob::kPrefixCaching] ? 5 : 0);
    return Score{true, true, g, 0.5};
  };
  const SearchOutcome out = coordinate_search(sp, eval, 0.0);
  EXPECT_TRUE(out.converged);
  EXPECT_EQ(out.evaluations, calls);
  const Settings best = sp.at(out.current);
  EXPECT_EQ(best[Knob::kMaxNumSeqs], 8);
  EXPECT_EQ(best[Knob::kMaxNumBatchedTokens], 1024);
  EXPECT_EQ(best[Knob::kPrefixCaching], 0);
  EXPECT_DOUBLE_EQ(out.current_score.goodput, 100);
  EXPECT_LT(calls, 7 * 5 * 2) << "fewer trials than the grid";
}

TEST(Search, InfeasibleSeedMovesTowardsTheSla) {
  const SearchSpace sp = three_dims();
  // Only seqs <= 4 meets the SLA; above it the excess grows with seqs.
  auto eval = [&](const std::vector<int>& p) -> std::optional<Score> {
    const Settings s = sp.at(p);
    const double seqs = static_cast<double>(s[Knob::kMaxNumSeqs]);
    if (seqs <= 4) return Score{true, true, seqs, 0.9};
    return Score{true, false, 1, seqs / 4};
  };
  const SearchOutcome out = coordinate_search(sp, eval, 0.03);
  EXPECT_EQ(sp.at(out.current)[Knob::kMaxNumSeqs], 4);
  EXPECT_TRUE(out.current_score.feasible);
}

TEST(Search, StopsWhenTheBudgetIsSpent) {
  const SearchSpace sp = three_dims();
  int calls = 0;
  auto eval = [&](const std::vector<int>&) -> std::optional<Score> {
    if (calls == 3) return std::nullopt;
    ++calls;
    return Score{true, true, static_cast<double>(calls), 0.5};
  };
  const SearchOutcome out = coordinate_search(sp, eval, 0.0);
  EXPECT_FALSE(out.converged);
  EXPECT_EQ(out.evaluations, 3);
}

TEST(Space, ClosedLoopCapsSequencesAndOverridesFixKnobs) {
  SpaceInputs in;
  in.concurrency = 12;
  in.seq_len = 100;
  in.max_model_len = 512;
  in.kv_bytes_per_token = 1000;
  auto sp = build_space(in);
  ASSERT_TRUE(sp) << sp.message();
  const Dimension* seqs = nullptr;
  for (const auto& d : sp->dims)
    if (d.knob == Knob::kMaxNumSeqs) seqs = &d;
  ASSERT_NE(seqs, nullptr);
  EXPECT_EQ(seqs->values, (std::vector<int64_t>{1, 2, 4, 8, 12}));
  EXPECT_EQ(seqs->values[static_cast<size_t>(seqs->seed)], 12) << "seeded at the requests in flight";
  for (const auto& d : sp->dims) EXPECT_NE(d.knob, Knob::kCudaGraphs) << "no CUDA graphs on the CPU";
  // kv-cache-memory: auto and the workload's need (12 x 100 tokens x 1000 B, +25%, rounded up to MiB).
  for (const auto& d : sp->dims)
    if (d.knob == Knob::kKvCacheMemory) EXPECT_EQ(d.values, (std::vector<int64_t>{0, 2 << 20}));

  in.overrides = {{Knob::kBlockSize, {32}}, {Knob::kMaxNumSeqs, {16, 4, 8}}};
  auto fixed = build_space(in);
  ASSERT_TRUE(fixed);
  EXPECT_EQ(fixed->base[Knob::kBlockSize], 32);
  for (const auto& d : fixed->dims) {
    EXPECT_NE(d.knob, Knob::kBlockSize) << "one value fixes the knob";
    if (d.knob == Knob::kMaxNumSeqs) EXPECT_EQ(d.values, (std::vector<int64_t>{4, 8, 16}));
  }
  in.overrides = {{Knob::kCudaGraphs, {0, 1}}};
  EXPECT_FALSE(build_space(in)) << "cuda-graphs on the CPU is refused";
  in.is_cuda = true;
  in.overrides = {{Knob::kKvCacheDtype, {0, 1}}};
  EXPECT_FALSE(build_space(in)) << "kv-cache-dtype fp32 on CUDA is refused";
  // CUDA: auto vs fp8 only when asked; never searched by default.
  in.overrides = {};
  auto plain = build_space(in);
  ASSERT_TRUE(plain);
  for (const auto& d : plain->dims) EXPECT_NE(d.knob, Knob::kKvCacheDtype);
  EXPECT_EQ(plain->base[Knob::kKvCacheDtype], 0);
  in.overrides = {{Knob::kKvCacheDtype, {0, 2}}};
  auto fp8 = build_space(in);
  ASSERT_TRUE(fp8) << fp8.message();
  bool searched = false;
  for (const auto& d : fp8->dims)
    if (d.knob == Knob::kKvCacheDtype) searched = d.values == std::vector<int64_t>{0, 2};
  EXPECT_TRUE(searched);
  in.overrides = {{Knob::kKvCacheDtype, {2}}};
  auto only8 = build_space(in);
  ASSERT_TRUE(only8);
  EXPECT_EQ(only8->base[Knob::kKvCacheDtype], 2);
  in.is_cuda = false;
  EXPECT_FALSE(build_space(in)) << "fp8 on the CPU is refused";
}

TEST(Pareto, KeepsOnlyUndominatedPoints) {
  // (latency, goodput): the front is (1,1), (2,3), (4,5); (3,2) and (5,5) are beaten, NaN is left out.
  const std::vector<std::pair<double, double>> xy = {{2, 3}, {3, 2}, {1, 1}, {4, 5}, {5, 5}, {NAN, 9}};
  EXPECT_EQ(pareto_front(xy), (std::vector<size_t>{0, 2, 3}));
}

}  // namespace
}  // namespace mopt::tune
