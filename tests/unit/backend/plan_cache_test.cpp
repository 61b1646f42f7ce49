// The persistent plan cache's file format, key and validation (backend/plan_cache.h), with a made-up GPU key: every
// fault (missing, truncated, garbage, flipped bytes, another key, unknown records, an unreadable file, an unwritable
// directory) must come back as a miss or a rejection with a reason, never as a hit with wrong records or a crash.
#include "backend/plan_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "../../../fuzz/plan_cache_fuzz_body.h"
#include "core/mmap.h"
#include "unit/fuzz_replay.h"

namespace mopt {
namespace {

namespace fs = std::filesystem;
using Outcome = PlanCacheLoad::Outcome;

PlanCacheKey fake_key() {
  PlanCacheKey k;
  k.model = {{"arch", "llama"}, {"n_embd", "4096"}, {"n_layer", "32"}, {"dtype", "bf16"}, {"max_seqs", "64"}};
  k.platform = {{"gpu", "Fake GPU 9000"}, {"driver", "12080"}, {"cuda_runtime", "12080"}, {"cublaslt", "120805"}};
  return k;
}

// The fuzz target's schema, so that its seed holds sample_records().
const std::vector<PlanRecordSchema>& kSchema = fuzz::plan_cache_fuzz_schema();

std::vector<PlanRecord> sample_records() {
  return {{"gemm", {1, 6144, 4096, -1}, {0, 1, 2, 3, 250, 251, 254, 255}},
          {"gemm", {64, 128256, 4096, 7}, {9, 9, 9, 9, 9, 9, 9, 9}},
          {"fused", {8, 4096, 14336}, {}},
          {"graph", {8}, {}}};
}

class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mopt_plan_cache_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / fake_key().file_name()).string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read_all(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  void write_all(const std::string& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << s;
  }
  PlanCacheLoad load() { return load_plan_cache(path_, fake_key(), kSchema); }

  fs::path dir_;
  std::string path_;
};

TEST_F(PlanCacheTest, RoundTripGivesTheSameRecords) {
  ASSERT_TRUE(save_plan_cache(path_, fake_key(), sample_records()).is_ok());
  const PlanCacheLoad r = load();
  ASSERT_EQ(r.outcome, Outcome::kHit) << r.reason;
  EXPECT_EQ(r.records, sample_records());
  // Saving again replaces the file and leaves no temporary behind.
  ASSERT_TRUE(save_plan_cache(path_, fake_key(), {}).is_ok());
  EXPECT_EQ(load().records.size(), 0u);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(PlanCacheTest, MissingFileIsAMissNotAWarning) {
  const PlanCacheLoad r = load();
  EXPECT_EQ(r.outcome, Outcome::kMissing);
  EXPECT_TRUE(r.records.empty());
}

TEST_F(PlanCacheTest, EveryTruncationIsRejected) {
  ASSERT_TRUE(save_plan_cache(path_, fake_key(), sample_records()).is_ok());
  const std::string full = read_all(path_);
  for (size_t n = 0; n < full.size(); ++n) {
    write_all(path_, full.substr(0, n));
    const PlanCacheLoad r = load();
    ASSERT_EQ(r.outcome, Outcome::kRejected) << "prefix of " << n << " bytes";
    EXPECT_FALSE(r.reason.empty());
    EXPECT_TRUE(r.records.empty());
  }
}

TEST_F(PlanCacheTest, EveryChangedByteIsRejected) {
  ASSERT_TRUE(save_plan_cache(path_, fake_key(), sample_records()).is_ok());
  const std::string full = read_all(path_);
  std::mt19937 rng(7);
  for (size_t i = 0; i < full.size(); ++i) {
    std::string bad = full;
    bad[i] = static_cast<char>(bad[i] ^ (1 + rng() % 255));
    write_all(path_, bad);
    ASSERT_EQ(load().outcome, Outcome::kRejected) << "byte " << i << " changed";
  }
}

TEST_F(PlanCacheTest, GarbageIsRejected) {
  std::mt19937 rng(11);
  const std::string valid_head = "mopt plan cache 1\n";
  for (int i = 0; i < 200; ++i) {
    std::string g(rng() % 600, '\0');
    for (char& c : g) c = static_cast<char>(i % 2 ? rng() % 256 : " \n0123456789abcdefgemmend=records"[rng() % 33]);
    if (i % 5 == 0) g = valid_head + g;  // a plausible start, then garbage
    write_all(path_, g);
    const PlanCacheLoad r = load();
    ASSERT_EQ(r.outcome, Outcome::kRejected) << "garbage file " << i;
    EXPECT_TRUE(r.records.empty());
  }
}

// A well-formed file (valid checksum) whose records do not fit the schema is rejected whole.
TEST_F(PlanCacheTest, RecordsOutsideTheSchemaAreRejected) {
  const std::vector<std::vector<PlanRecord>> bad = {
      {{"gemm", {1, 2, 3}, {0, 0, 0, 0, 0, 0, 0, 0}}},     // one int short
      {{"gemm", {1, 2, 3, 4}, {0, 0, 0, 0}}},              // blob too short
      {{"fused", {1, 2, 3}, {}}, {"tile", {1}, {}}},       // unknown kind after a good record
      {{"graph", {1, 2}, {}}},                             // one int too many
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    ASSERT_TRUE(save_plan_cache(path_, fake_key(), bad[i]).is_ok());
    const PlanCacheLoad r = load();
    EXPECT_EQ(r.outcome, Outcome::kRejected) << "case " << i;
    EXPECT_TRUE(r.records.empty());
  }
}

TEST_F(PlanCacheTest, KeyMismatchIsRejectedWithWhatChanged) {
  ASSERT_TRUE(save_plan_cache(path_, fake_key(), sample_records()).is_ok());
  PlanCacheKey now = fake_key();
  now.platform[1].value = "12090";  // a driver update
  EXPECT_EQ(now.file_name(), fake_key().file_name());  // same model and limits: the same file
  const PlanCacheLoad r = load_plan_cache(path_, now, kSchema);
  ASSERT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_NE(r.reason.find("driver: file 12080, now 12090"), std::string::npos) << r.reason;

  PlanCacheKey other_gpu = fake_key();
  other_gpu.platform.push_back({"sms", "132"});  // a field more
  EXPECT_EQ(load_plan_cache(path_, other_gpu, kSchema).outcome, Outcome::kRejected);

  PlanCacheKey other_limits = fake_key();
  other_limits.model[4].value = "128";
  EXPECT_NE(other_limits.file_name(), fake_key().file_name());  // other engine limits: another file
  EXPECT_EQ(load_plan_cache(path_, other_limits, kSchema).outcome, Outcome::kRejected);
}

TEST_F(PlanCacheTest, UnreadableFileIsRejected) {
  fs::create_directories(path_);  // a directory where the file should be: open succeeds, reading fails
  const PlanCacheLoad r = load();
  EXPECT_EQ(r.outcome, Outcome::kRejected);
  EXPECT_FALSE(r.reason.empty());
}

TEST_F(PlanCacheTest, UnwritableDirectoryIsAnErrorAndLeavesNothing) {
  // A regular file where the cache directory should be: no user (root included) can create files under it.
  const std::string blocker = (dir_ / "not_a_dir").string();
  write_all(blocker, "x");
  const Status st = save_plan_cache(blocker + "/mopt/" + fake_key().file_name(), fake_key(), sample_records());
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not_a_dir"), std::string::npos) << st.message();
  // A path that is a directory cannot be replaced by the file: an error, and no temporary left behind.
  fs::create_directories(path_);
  EXPECT_FALSE(save_plan_cache(path_, fake_key(), sample_records()).is_ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // only the blocker
}

TEST_F(PlanCacheTest, ControlCharactersInTheKeyCannotBreakTheFormat) {
  PlanCacheKey k = fake_key();
  k.platform[0].value = "Fake\nGPU\r";
  ASSERT_TRUE(save_plan_cache(path_, k, sample_records()).is_ok());
  const PlanCacheLoad r = load_plan_cache(path_, k, kSchema);
  ASSERT_EQ(r.outcome, Outcome::kHit) << r.reason;
  EXPECT_EQ(r.records, sample_records());
}

// The fuzz target's seed (fuzz/corpus/plan_cache) is a valid file for its key, so that mutants start from a hit;
// then its mutants, as read and re-signed (the body aborts on an accepted record outside the schema).
TEST(PlanCacheFuzz, SeedIsAHitAndMutantsKeepTheSchema) {
  auto seed = read_file(std::string(MOPT_SOURCE_DIR) + "/fuzz/corpus/plan_cache/four_records.txt");
  ASSERT_TRUE(seed.is_ok()) << seed.message();
  const PlanCacheLoad r = parse_plan_cache(*seed, fuzz::plan_cache_fuzz_key(), fuzz::plan_cache_fuzz_schema());
  ASSERT_EQ(r.outcome, Outcome::kHit) << r.reason;
  EXPECT_EQ(r.records, sample_records());
  // Its records, written by save_plan_cache, give the same bytes.
  const std::string path = (fs::temp_directory_path() / ("mopt_plan_cache_seed_" + std::to_string(getpid()))).string();
  ASSERT_TRUE(save_plan_cache(path, fuzz::plan_cache_fuzz_key(), sample_records()).is_ok());
  auto written = read_file(path);
  fs::remove(path);
  ASSERT_TRUE(written.is_ok());
  EXPECT_EQ(*written, *seed);
  test::replay({test::to_bytes(*seed)}, 3000, 21, fuzz::plan_cache_body);
}

TEST(PlanCacheDir, FollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(default_plan_cache_dir(), "/tmp/xdg/mopt");
  setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  EXPECT_EQ(default_plan_cache_dir(), "/home/someone/.cache/mopt");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_plan_cache_dir(), "/home/someone/.cache/mopt");
  unsetenv("HOME");
  EXPECT_EQ(default_plan_cache_dir(), "");
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace mopt
