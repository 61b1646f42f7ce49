// Helpers of the tensor-parallel tests (CPU: tensor_parallel_test.cpp; CUDA: cuda/tp_cuda_test.cpp): one
// deterministic workload through a runner's paged cache, and how far a sharded runner's logits are from the
// unsharded runner's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/runner.h"
#include "unit/backend/seq_driver.h"

namespace mopt::test {

inline constexpr int kTwoSeqBlock = 16, kTwoSeqBlocks = 64;

// Two sequences fed alternately through one paged cache of kTwoSeqBlocks x kTwoSeqBlock: a prefill of `prompt`
// tokens, then `decode` single tokens each. Returns every logit row, in feeding order. init: make the cache
// (else the caller did).
inline std::vector<float> run_two_sequences(ModelRunner& r, int prompt, int decode, bool init = true) {
  constexpr int kBlock = kTwoSeqBlock, kBlocks = kTwoSeqBlocks;
  if (init) EXPECT_TRUE(r.init_kv_cache(kBlocks, kBlock, 0).is_ok());
  SeqDriver drv(r, kBlocks, kBlock, 5);
  const int a = drv.add_sequence(), b = drv.add_sequence();
  std::mt19937 rng(17);
  auto toks = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(r.config().n_vocab));
    return t;
  };
  std::vector<float> all;
  auto feed = [&](int s, int n) {
    auto l = drv.feed(s, toks(n));
    EXPECT_TRUE(drv.last_status().is_ok()) << drv.last_status().message();
    all.insert(all.end(), l.begin(), l.end());
  };
  feed(a, prompt);
  feed(b, prompt + 3);
  for (int i = 0; i < decode; ++i) {
    feed(a, 1);
    feed(b, 1);
  }
  return all;
}

struct LogitDiff {
  size_t rows = 0;
  double max_abs = 0;  // max |got - want|
  double max_ref = 0;  // max |want|
  int top1_changes = 0;
  int top1_changes_off_tie = 0;  // changed rows whose reference top-2 margin is at least `tie`
};

// got and want: [rows, V] logits of the same inputs.
inline LogitDiff compare_logits(const std::vector<float>& got, const std::vector<float>& want, int V,
                                float tie = 0.f) {
  LogitDiff d;
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return d;
  d.rows = got.size() / static_cast<size_t>(V);
  for (size_t i = 0; i < got.size(); ++i) {
    d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(got[i] - want[i])));
    d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(want[i])));
  }
  for (size_t row = 0; row < d.rows; ++row) {
    const float* w = &want[row * static_cast<size_t>(V)];
    if (argmax(&got[row * static_cast<size_t>(V)], V) == argmax(w, V)) continue;
    ++d.top1_changes;
    std::vector<float> s(w, w + V);
    std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
    if (s[0] - s[1] >= tie) ++d.top1_changes_off_tie;
  }
  return d;
}

}  // namespace mopt::test
