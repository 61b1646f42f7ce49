// Helpers of the mixture-of-experts backend tests: the test models (tests/data/moe/<name>.json, regenerated with
// mopt synth's writer and the seed scripts/moe_reference_gpu.sh uses), runs of the CPU runner over one sequence or a
// batch of sequences, and logit comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/argmax.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "unit/backend/model_util.h"
#include "unit/backend/seq_driver.h"

namespace mopt::test {

// The seed scripts/moe_reference_gpu.sh passes to mopt synth: the reference outputs are of these weights.
inline constexpr uint64_t kSynthSeed = 7;

// The 24 token ids of scripts/moe_reference.py (TOKENS).
inline const std::vector<int32_t> kRefTokens = {1,   17, 300, 42,  255, 7,   489, 128, 64, 3,   3,  77,
                                                200, 411, 9,  150, 33,  506, 260, 12,  99, 318, 45, 42};

// The checkout's tests/data/moe; on the GPU machine, which runs the tests from a copy of the checkout at another
// path (the repository root as working directory), the relative one.
inline std::string moe_data_dir() {
  const std::string built = std::string(MOPT_SOURCE_DIR) + "/tests/data/moe";
  return std::filesystem::exists(built) ? built : "tests/data/moe";
}

// The test configs' names (tests/data/moe/<name>.json, reference outputs <name>.ref.json excluded), sorted.
inline std::vector<std::string> moe_config_names() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(moe_data_dir())) {
    const std::string f = e.path().filename().string();
    if (f.size() > 5 && f.ends_with(".json") && !f.ends_with(".ref.json")) out.push_back(f.substr(0, f.size() - 5));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Writes the checkpoint of config `name` (mopt synth, f32 unless told) into a fresh folder and loads it.
inline std::unique_ptr<Model> synth_moe(const std::string& name, uint64_t seed = kSynthSeed, DType dtype = DType::F32) {
  const std::string dir = ::testing::TempDir() + "mopt_moe_" + std::to_string(::getpid()) + "_" + name + "_" +
                          std::to_string(seed) + "_" + dtype_name(dtype);
  std::filesystem::remove_all(dir);
  RandomCheckpointOptions o;
  o.config_path = moe_data_dir() + "/" + name + ".json";
  o.out_dir = dir;
  o.dtype = dtype;
  o.seed = seed;
  auto w = write_random_checkpoint(o);
  EXPECT_TRUE(w.is_ok()) << w.message();
  auto m = load_model(dir);
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

inline std::unique_ptr<CpuRunner> cpu_runner(const Model& m, int n_threads = 2) {
  RunnerOptions ro;
  ro.n_threads = n_threads;
  ro.kv_cache_dtype = KvCacheDtype::kFloat32;
  auto r = CpuRunner::create(m, ro);
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (!r.is_ok()) return nullptr;
  Status s = (*r)->init_kv_cache(64, 16, 0);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return std::move(r).value();
}

// Logits [tokens.size(), n_vocab] of one sequence fed in chunks of `chunk` tokens (chunk 1: token-by-token decode).
inline std::vector<float> run_sequence(ModelRunner& r, const std::vector<int32_t>& tokens, int chunk) {
  SeqDriver drv(r, 64, 16, 5);
  const int s = drv.add_sequence();
  std::vector<float> all;
  for (size_t pos = 0; pos < tokens.size(); pos += static_cast<size_t>(chunk)) {
    const size_t n = std::min(tokens.size() - pos, static_cast<size_t>(chunk));
    auto l = drv.feed(s, std::vector<int32_t>(tokens.begin() + static_cast<long>(pos),
                                              tokens.begin() + static_cast<long>(pos + n)));
    EXPECT_TRUE(drv.last_status().is_ok()) << drv.last_status().message();
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

struct LogitDiff {
  double max_abs = 0;    // max |a - b|
  double max_ref = 0;    // max |b|
  int rows = 0, top1_agree = 0;
};

inline LogitDiff diff_logits(const std::vector<float>& a, const std::vector<float>& b, int n_vocab) {
  LogitDiff d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(a[i]) - b[i]));
    d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(b[i])));
  }
  d.rows = static_cast<int>(std::min(a.size(), b.size()) / static_cast<size_t>(n_vocab));
  for (int r = 0; r < d.rows; ++r)
    d.top1_agree += argmax_first(a.data() + static_cast<size_t>(r) * n_vocab, n_vocab) ==
                    argmax_first(b.data() + static_cast<size_t>(r) * n_vocab, n_vocab);
  return d;
}

// Routing that is wrong on purpose, to show that a comparison can fail: kRoutingMutations[i] names mutation i.
inline constexpr const char* kRoutingMutations[2] = {"flipped norm_topk_prob", "one expert fewer"};

// The CPU runner's logits of kRefTokens (one prefill) for a copy of m with routing mutation i.
inline std::vector<float> wrong_routing_logits(const Model& m, int mutation) {
  auto bad = converted_copy(m, [](const TensorView&, TensorView&, std::vector<uint8_t>&) { return false; });
  if (mutation == 0) bad->config.expert_norm_topk = !bad->config.expert_norm_topk;
  if (mutation == 1) bad->config.n_expert_used -= 1;
  auto r = cpu_runner(*bad);
  return r ? run_sequence(*r, kRefTokens, 24) : std::vector<float>();
}

}  // namespace mopt::test
