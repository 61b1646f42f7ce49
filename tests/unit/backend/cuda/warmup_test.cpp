// CudaRunner::warmup and the plan cache on a GPU (docs/warmup.md): after the warm-up no step the runner's limits
// allow tunes a GEMM or captures a graph; a second runner with the same key takes every plan from the cache (none
// timed) and ends with the same plans; a corrupt cache and --no-plan-cache fall back to tuning. The cache file's
// own faults are tested without a GPU (tests/unit/backend/plan_cache_test.cpp).
#include <gtest/gtest.h>

// Without CUDA (the sanitizer builds) there is no runner to warm: the whole file is for CUDA builds.
#if MOPT_HAVE_CUDA
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "model/model.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

namespace fs = std::filesystem;
constexpr int kBlock = 16, kBlocks = 64, kMaxSeqs = 8, kMaxTokens = 80;

Model small_model() { return cudatest::small_hd128_model("random warm-up test"); }  // 2 layers, no qkv bias

std::unique_ptr<ModelRunner> make_runner(const Model& m, const std::string& cache_dir, bool use_cache = true,
                                         float one_row_eps = 0.f, DType weights = DType::BF16) {
  RunnerOptions o;
  o.one_row_plan_eps = one_row_eps;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = kMaxTokens;
  o.max_seqs = kMaxSeqs;
  o.plan_cache = use_cache;
  o.plan_cache_dir = cache_dir;
  CudaRunnerExtras ex;
  ex.random_weights = true;
  ex.random_seed = 3;
  ex.random_weight_dtype = weights;
  if (weights != DType::BF16) ex.random_lm_head_dtype = weights;
  auto r = create_cuda_runner(m, o, ex);
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (!r.is_ok()) return nullptr;
  EXPECT_TRUE(r.value()->init_kv_cache(kBlocks, kBlock, 0).is_ok());
  return std::move(r).value();
}

// A step: sequences (one per entry of `lens`: new tokens, context before them), sequence q in blocks
// [5q, 5q + 5) (up to kMaxTokens tokens), logits for `rows` (default: each sequence's last token).
constexpr int kSeqBlocks = (kMaxTokens + kBlock - 1) / kBlock;
BatchArrays step(const std::vector<std::pair<int, int>>& lens, std::vector<int32_t> rows = {}) {
  BatchArrays a;
  a.max_blocks_per_seq = kSeqBlocks;
  for (size_t q = 0; q < lens.size(); ++q) {
    const auto [n_new, before] = lens[q];
    for (int i = 0; i < n_new; ++i) {
      a.tokens.push_back((7 * i + 13 * static_cast<int>(q)) % 1000);
      a.positions.push_back(before + i);
      a.slot_mapping.push_back(static_cast<int>(q) * kSeqBlocks * kBlock + before + i);
    }
    a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
    a.seq_lens.push_back(before + n_new);
    for (int b = 0; b < kSeqBlocks; ++b) a.block_tables.push_back(static_cast<int>(q) * kSeqBlocks + b);
  }
  if (rows.empty())
    for (size_t q = 0; q < lens.size(); ++q) rows.push_back(a.query_start[q + 1] - 1);
  a.logits_indices = rows;
  return a;
}

// Steps of every kind serving can produce under the limits: prefills of many lengths, decode batches of every
// size (graph buckets, padded), mixed prefill + decode steps, and a step with fewer logits rows than sequences.
std::vector<BatchArrays> serving_steps() {
  std::vector<BatchArrays> out;
  for (int len : {1, 2, 3, 5, 8, 9, 17, 31, 33, 40, 63, 64, 65, 71, 80})  // above 64: one GEMM row bucket
    out.push_back(step({{len, 0}}));
  for (int n = 1; n <= kMaxSeqs; ++n) {
    std::vector<std::pair<int, int>> seqs(static_cast<size_t>(n), {1, 20});
    out.push_back(step(seqs));
  }
  out.push_back(step({{1, 30}, {1, 31}, {1, 32}, {5, 0}}));  // mixed: 8 tokens, 4 logits rows
  out.push_back(step({{1, 40}, {1, 41}, {1, 42}}, {0, 2}));  // decode with two of three rows
  out.push_back(step({{1, 40}, {1, 41}, {1, 42}, {1, 43}, {1, 44}}, {0, 1, 2, 3}));
  return out;
}

std::string plans_without_times(const ModelRunner& r) {
  const std::string rep = dynamic_cast<const CudaModelRunner&>(r).gemm_report();
  return std::regex_replace(rep, std::regex(R"(\s+[0-9.]+ us\s+[0-9]+ GB/s)"), "");
}

class CudaWarmup : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("mopt_warmup_test_" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The plan-cache files in dir_ ("plans-*"), in directory order.
  std::vector<std::string> cache_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind("plans-", 0) == 0) out.push_back(e.path().string());
    return out;
  }
  int count_cache_files() const { return static_cast<int>(cache_files().size()); }
  std::string cache_file() const {
    const std::vector<std::string> f = cache_files();
    return f.empty() ? std::string() : f.front();
  }
  std::string dir_;
};

TEST_F(CudaWarmup, NothingTunesAfterItAndTheCacheSkipsTuning) {
  SKIP_WITHOUT_GPU();
  const Model model = small_model();
  auto a = make_runner(model, dir_);
  ASSERT_TRUE(a);
  auto rep = a->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->graphs, 4);  // buckets 1, 2, 4, 8
  EXPECT_GT(rep->plans_tuned, 0u);
  EXPECT_EQ(rep->plans_from_cache, 0u);
  ASSERT_FALSE(cache_file().empty()) << rep->plan_cache;

  const TuningCounters after = a->tuning_counters();
  std::vector<int32_t> tok_a;
  for (const BatchArrays& s : serving_steps()) {
    std::vector<int32_t> t(static_cast<size_t>(s.view().n_out()));
    ASSERT_TRUE(a->forward_sample(s.view(), {}, t.data()).is_ok());
    const TuningCounters now = a->tuning_counters();
    EXPECT_EQ(now.gemm_tunings, after.gemm_tunings) << "a step of " << s.tokens.size() << " tokens tuned";
    EXPECT_EQ(now.graph_captures, after.graph_captures) << "a step of " << s.tokens.size() << " tokens captured";
    tok_a.insert(tok_a.end(), t.begin(), t.end());
  }

  // Same key: every plan from the cache, none timed, the same plans, the same greedy tokens.
  auto b = make_runner(model, dir_);
  ASSERT_TRUE(b);
  auto rep_b = b->warmup({});
  ASSERT_TRUE(rep_b.is_ok()) << rep_b.message();
  EXPECT_EQ(rep_b->plans_tuned, 0u) << rep_b->plan_cache;
  EXPECT_GT(rep_b->plans_from_cache, 0u);
  EXPECT_EQ(rep_b->graphs, 4);
  EXPECT_EQ(plans_without_times(*b), plans_without_times(*a));
  // The row buckets' heuristic queries (not in the cache) happen in b's warm-up, none after it.
  const TuningCounters b_after = b->tuning_counters();
  std::vector<int32_t> tok_b;
  for (const BatchArrays& s : serving_steps()) {
    std::vector<int32_t> t(static_cast<size_t>(s.view().n_out()));
    ASSERT_TRUE(b->forward_sample(s.view(), {}, t.data()).is_ok());
    tok_b.insert(tok_b.end(), t.begin(), t.end());
  }
  EXPECT_EQ(tok_b, tok_a);
  EXPECT_EQ(b->tuning_counters().gemm_tunings, b_after.gemm_tunings);
}

// One-row plans chosen with the verification rows in view (RunnerOptions::one_row_plan_eps) are other plans: a
// runner with it neither reads nor replaces the cache of a runner without it, and one with the same eps reads it.
TEST_F(CudaWarmup, OneRowPlanEpsHasItsOwnCache) {
  SKIP_WITHOUT_GPU();
  const Model model = small_model();
  for (float eps : {0.f, 0.05f}) {
    auto r = make_runner(model, dir_, true, eps);
    ASSERT_TRUE(r);
    auto rep = r->warmup({});
    ASSERT_TRUE(rep.is_ok()) << rep.message();
    EXPECT_GT(rep->plans_tuned, 0u) << "eps " << eps << ": " << rep->plan_cache;
    EXPECT_EQ(rep->plans_from_cache, 0u) << "eps " << eps;
  }
  EXPECT_EQ(count_cache_files(), 2);
  auto again = make_runner(model, dir_, true, 0.05f);
  ASSERT_TRUE(again);
  auto rep = again->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->plans_tuned, 0u) << rep->plan_cache;
  EXPECT_GT(rep->plans_from_cache, 0u);
}

// Quantized weights: their fused decode plans (every weight format) and FP8 cuBLASLt plans come from the cache too,
// and a model of the same shape in another format has its own file (a fused plan's key does not name the group
// size; the file's key names the layouts).
TEST_F(CudaWarmup, QuantizedPlansComeFromTheCache) {
  SKIP_WITHOUT_GPU();
  const Model model = small_model();
  int files = 0;
  for (DType w : {DType::INT4_G128, DType::Q4_0, DType::FP8, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(w));
    auto a = make_runner(model, dir_, true, 0.f, w);
    ASSERT_TRUE(a);
    auto rep = a->warmup({});
    ASSERT_TRUE(rep.is_ok()) << rep.message();
    EXPECT_GT(rep->plans_tuned, 0u) << rep->plan_cache;
    EXPECT_EQ(rep->plans_from_cache, 0u) << rep->plan_cache;
    EXPECT_EQ(count_cache_files(), ++files);
    const std::string report = dynamic_cast<const CudaModelRunner&>(*a).gemm_report();
    if (w == DType::FP8) EXPECT_NE(report.find("fp8 gemm"), std::string::npos) << report;
    else EXPECT_NE(report.find("weights "), std::string::npos) << report;

    auto b = make_runner(model, dir_, true, 0.f, w);
    ASSERT_TRUE(b);
    auto rep_b = b->warmup({});
    ASSERT_TRUE(rep_b.is_ok()) << rep_b.message();
    EXPECT_EQ(rep_b->plans_tuned, 0u) << rep_b->plan_cache;
    EXPECT_GT(rep_b->plans_from_cache, 0u);
    EXPECT_EQ(plans_without_times(*b), plans_without_times(*a));
  }
}

TEST_F(CudaWarmup, CorruptCacheAndNoCacheFallBackToTuning) {
  SKIP_WITHOUT_GPU();
  const Model model = small_model();
  {
    auto a = make_runner(model, dir_);
    ASSERT_TRUE(a && a->warmup({}).is_ok());
  }
  const std::string file = cache_file();
  ASSERT_FALSE(file.empty());
  fs::resize_file(file, fs::file_size(file) / 2);  // truncated
  auto c = make_runner(model, dir_);
  ASSERT_TRUE(c);
  auto rep = c->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->plan_cache.rfind("rejected", 0), 0u) << rep->plan_cache;
  EXPECT_GT(rep->plans_tuned, 0u);
  {
    std::ofstream(file, std::ios::trunc) << "mopt plan cache 1\ngarbage\n";
    auto d = make_runner(model, dir_);
    auto rep_d = d->warmup({});
    ASSERT_TRUE(rep_d.is_ok()) << rep_d.message();
    EXPECT_GT(rep_d->plans_tuned, 0u);  // and the file is replaced by a valid one:
  }
  auto e = make_runner(model, dir_);
  auto rep_e = e->warmup({});
  ASSERT_TRUE(rep_e.is_ok());
  EXPECT_EQ(rep_e->plans_tuned, 0u) << rep_e->plan_cache;

  fs::remove_all(dir_);
  auto off = make_runner(model, dir_, false);
  auto rep_off = off->warmup({});
  ASSERT_TRUE(rep_off.is_ok());
  EXPECT_EQ(rep_off->plan_cache.rfind("off", 0), 0u);
  EXPECT_GT(rep_off->plans_tuned, 0u);
  EXPECT_FALSE(fs::exists(dir_));  // nothing written
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
