// GPU sampling against host-computed kept sets and the filtered distribution.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cuda/kernels.h"
#include "core/argmax.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cudatest::DevVec;

struct Filter {
  float temp = 1.f;
  int top_k = 0;
  float top_p = 1.f, min_p = 0.f;
};

// Host reference: probabilities of the kept set (each filter on the full distribution, intersection).
std::vector<double> kept_probs(const std::vector<float>& l, const Filter& f) {
  const int V = static_cast<int>(l.size());
  const float mx = *std::max_element(l.begin(), l.end());
  std::vector<double> z(V), p(V);
  for (int i = 0; i < V; ++i) z[i] = (l[i] - mx) / f.temp;
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
  std::vector<bool> keep(V, true);
  if (f.top_k > 0)
    for (int r = f.top_k; r < V; ++r) keep[order[r]] = false;
  if (f.min_p > 0)
    for (int i = 0; i < V; ++i) keep[i] = keep[i] && z[i] >= std::log(f.min_p);
  if (f.top_p < 1.f) {
    double total = 0;
    for (int i = 0; i < V; ++i) total += std::exp(z[i]);
    double acc = 0;
    bool reached = false;
    for (int r = 0; r < V; ++r) {
      if (reached) keep[order[r]] = false;
      acc += std::exp(z[order[r]]);
      if (acc >= f.top_p * total) reached = true;
    }
  }
  double s = 0;
  for (int i = 0; i < V; ++i) s += keep[i] ? std::exp(z[i]) : 0.0;
  for (int i = 0; i < V; ++i) p[i] = keep[i] ? std::exp(z[i]) / s : 0.0;
  return p;
}

// One filter's settings for all R rows on the device (seed of row r: seed_mul * r + seed_add), and the launch
// parameters over them: logits [R, V], tokens [R].
struct DeviceRows {
  DevVec<float> temp, top_p, min_p;
  DevVec<int32_t> top_k, tokens;
  DevVec<uint64_t> seeds;
  DeviceRows(const Filter& f, int R, uint64_t seed_mul, uint64_t seed_add)
      : temp(std::vector<float>(R, f.temp)), top_p(std::vector<float>(R, f.top_p)),
        min_p(std::vector<float>(R, f.min_p)), top_k(std::vector<int32_t>(R, f.top_k)), tokens(R),
        seeds(R) {
    std::vector<uint64_t> s(R);
    for (int r = 0; r < R; ++r) s[static_cast<size_t>(r)] = seed_mul * r + seed_add;
    seeds.upload(s);
  }
  cuda::SampleParams params(const float* logits, int V) const {
    cuda::SampleParams p;
    p.logits = logits;
    p.tokens = tokens.get();
    p.temperature = temp.get();
    p.top_k = top_k.get();
    p.top_p = top_p.get();
    p.min_p = min_p.get();
    p.seeds = seeds.get();
    p.n_rows = static_cast<int>(tokens.size());
    p.n_vocab = V;
    return p;
  }
};

TEST(CudaSampling, GreedyAndFiltersMatchHostDistribution) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  const int V = 3000, R = 20000;  // R rows of the same logits with different seeds -> empirical distribution
  std::vector<float> l(V);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (float& v : l) v = nd(rng);
  const Filter filters[] = {{0.f, 0, 1.f, 0.f}, {1.f, 1, 1.f, 0.f}, {1.f, 0, 1.f, 0.f}, {0.7f, 20, 1.f, 0.f},
                            {1.f, 0, 0.8f, 0.f}, {1.3f, 0, 1.f, 0.1f}, {1.f, 50, 0.9f, 0.05f}};
  std::vector<float> all(static_cast<size_t>(R) * V);
  for (int r = 0; r < R; ++r) std::copy(l.begin(), l.end(), all.begin() + static_cast<size_t>(r) * V);
  DevVec<float> dl(all);
  for (const Filter& f : filters) {
    SCOPED_TRACE(testing::Message() << "temp " << f.temp << " top_k " << f.top_k << " top_p " << f.top_p
                                    << " min_p " << f.min_p);
    DeviceRows rows(f, R, 1000003ull, 17);
    const DevVec<int32_t>& dout = rows.tokens;
    const cuda::SampleParams p = rows.params(dl.get(), V);
    CUDA_OK(cuda::launch_sample(p, nullptr));
    const auto got = dout.download();
    const int amax = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
    if (f.temp == 0.f || f.top_k == 1) {
      for (int r = 0; r < R; ++r) ASSERT_EQ(got[r], amax);
      continue;
    }
    const std::vector<double> p_ref = kept_probs(l, f);
    std::vector<int> count(V, 0);
    for (int t : got) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
      ASSERT_GT(p_ref[t], 0.0) << "token " << t << " is outside the kept set";
      ++count[t];
    }
    // Every token with expected count >= 50 within 5 standard deviations of a binomial.
    for (int i = 0; i < V; ++i) {
      const double e = p_ref[i] * R;
      if (e < 50) continue;
      EXPECT_NEAR(count[i], e, 5 * std::sqrt(e * (1 - p_ref[i]))) << "token " << i;
    }
    // Same seeds, same tokens.
    CUDA_OK(cuda::launch_sample(p, nullptr));
    EXPECT_EQ(dout.download(), got);
  }
}

// The one-launch multi-CTA argmax against std::max_element (first maximum): vocabularies from 1 to a 128k
// Llama-3 one (64 slices), ties across slices, NaN ignored, -inf rows, a NaN row (token 0), and launches
// repeated on the same scratch (each launch must leave it zero).
TEST(CudaSampling, ArgmaxMatchesHost) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int V : {1, 7, 2048, 2049, 50000, 128256}) {
    SCOPED_TRACE(testing::Message() << "vocab " << V);
    const int R = 9;
    std::vector<float> l(static_cast<size_t>(R) * V);
    for (float& v : l) v = nd(rng);
    auto row = [&](int r) { return l.data() + static_cast<size_t>(r) * V; };
    // Row 1: the maximum twice, the later copy in another slice (the lower index wins).
    if (V > 1) {
      const int a = V / 3, b = V - 1;
      row(1)[a] = row(1)[b] = 100.f;
    }
    for (int i = 0; i < V; i += 3) row(2)[i] = std::nanf("");  // row 2: NaN everywhere but the other lanes
    std::fill(row(3), row(3) + V, -INFINITY);                 // row 3: all -inf -> index 0
    std::fill(row(4), row(4) + V, std::nanf(""));             // row 4: all NaN -> 0
    std::fill(row(5), row(5) + V, -2.5f);                     // row 5: all equal -> 0
    row(6)[V - 1] = 1e30f;                                    // row 6: the last element
    std::vector<int> want(R);
    for (int r = 0; r < R; ++r) {
      int best = 0;
      bool any = false;
      for (int i = 0; i < V; ++i) {
        const float v = row(r)[i];
        if (v != v) continue;
        if (!any || v > row(r)[best]) best = i;
        any = true;
      }
      want[r] = best;
    }
    DevVec<float> dl(l);
    DevVec<int32_t> dout(R);
    DevVec<uint8_t> scratch(cuda::argmax_scratch_bytes(R) + 8);
    CUDA_OK(cudaMemset(scratch.get(), 0, cuda::argmax_scratch_bytes(R) + 8));
    for (int rep = 0; rep < 3; ++rep) {
      dout.poison();
      CUDA_OK(cuda::launch_argmax(dl.get(), R, V, dout.get(), scratch.get(), nullptr));
      const auto got = dout.download();
      for (int r = 0; r < R; ++r) EXPECT_EQ(got[r], want[r]) << "row " << r << " launch " << rep;
    }
    // With values: the same tokens, and each row's picked logit (NaN for the all-NaN row).
    DevVec<float> dval(R);
    dout.poison();
    CUDA_OK(cudaMemset(dval.get(), 0, R * sizeof(float)));  // zeros, not NaN: the all-NaN row must be written
    CUDA_OK(cuda::launch_argmax(dl.get(), R, V, dout.get(), scratch.get(), nullptr, dval.get()));
    const auto got = dout.download();
    const auto val = dval.download();
    for (int r = 0; r < R; ++r) {
      EXPECT_EQ(got[r], want[r]) << "row " << r << " (with values)";
      const float w = row(r)[want[r]];
      if (w != w) {
        EXPECT_TRUE(std::isnan(val[r])) << "row " << r;
      } else {
        EXPECT_EQ(val[r], w) << "row " << r;
      }
    }
    const auto left = scratch.download();
    EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](uint8_t b) { return b == 0; })) << "scratch not reset";
  }
}

// Token masks in the sampling kernel, on a vocabulary that is not a multiple of 64 and wider than the CTA (the
// strided loops, the last partial mask word): draws under a mask follow the host's filtered distribution of the
// masked logits (disallowed ids at -inf, as the engine's host sampler masks them), greedy rows pick the host's
// masked argmax_first, rows with one allowed id (the first and the last id) get it, and rows without a mask
// (mask_row -1) in the same launch are unaffected.
TEST(CudaSampling, TokenMasksMatchHostMaskedDistribution) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  const int V = 2113, W = (V + 63) / 64, R = 16000;
  std::vector<float> l(V);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (float& v : l) v = nd(rng);
  std::vector<uint64_t> mask(W, 0);  // ~15% of the ids, the last one included
  std::bernoulli_distribution on(0.15);
  for (int t = 0; t < V; ++t)
    if (on(rng) || t == V - 1) mask[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  std::vector<float> lm = l;  // the host's masked logits
  for (int t = 0; t < V; ++t)
    if (!((mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1)) lm[static_cast<size_t>(t)] = -INFINITY;
  // Masks: 0 the random one, 1 only id 0, 2 only id V - 1.
  std::vector<uint64_t> masks(3 * static_cast<size_t>(W), 0);
  std::copy(mask.begin(), mask.end(), masks.begin());
  masks[static_cast<size_t>(W)] = 1;
  masks[2 * static_cast<size_t>(W) + (V - 1) / 64] = uint64_t{1} << ((V - 1) % 64);
  std::vector<float> all(static_cast<size_t>(R) * V);
  for (int r = 0; r < R; ++r) std::copy(l.begin(), l.end(), all.begin() + static_cast<size_t>(r) * V);
  DevVec<float> dl(all);
  DevVec<uint64_t> dm(masks);
  const Filter filters[] = {{0.f, 0, 1.f, 0.f}, {1.f, 0, 1.f, 0.f}, {0.8f, 30, 1.f, 0.f}, {1.2f, 0, 0.85f, 0.02f}};
  for (const Filter& f : filters) {
    SCOPED_TRACE(testing::Message() << "temp " << f.temp << " top_k " << f.top_k << " top_p " << f.top_p
                                    << " min_p " << f.min_p);
    // Rows r % 8: 0..4 the random mask, 5 only id 0, 6 only id V - 1, 7 no mask.
    std::vector<int32_t> mask_row(R);
    for (int r = 0; r < R; ++r) {
      const int k = r % 8;
      mask_row[static_cast<size_t>(r)] = k < 5 ? 0 : k == 5 ? 1 : k == 6 ? 2 : -1;
    }
    DeviceRows rows(f, R, 7919ull, 3);
    DevVec<int32_t> dmr(mask_row);
    cuda::SampleParams p = rows.params(dl.get(), V);
    p.mask_row = dmr.get();
    p.masks = dm.get();
    CUDA_OK(cuda::launch_sample(p, nullptr));
    const auto got = rows.tokens.download();
    const bool greedy = f.temp == 0.f;  // kept_probs needs a temperature
    const std::vector<double> p_masked = greedy ? std::vector<double>() : kept_probs(lm, f);
    const std::vector<double> p_plain = greedy ? std::vector<double>() : kept_probs(l, f);
    const int amax_masked = argmax_first(lm.data(), V), amax = argmax_first(l.data(), V);
    std::vector<int> count(V, 0);
    int n_masked_rows = 0;
    for (int r = 0; r < R; ++r) {
      const int t = got[static_cast<size_t>(r)];
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
      if (r % 8 == 5) {
        ASSERT_EQ(t, 0) << "row " << r;
      }
      if (r % 8 == 6) {
        ASSERT_EQ(t, V - 1) << "row " << r;
      }
      if (r % 8 == 7) {
        if (greedy) {
          ASSERT_EQ(t, amax) << "row " << r;
        } else {
          ASSERT_GT(p_plain[static_cast<size_t>(t)], 0.0) << "row " << r;
        }
      }
      if (r % 8 >= 5) continue;
      if (greedy) {
        ASSERT_EQ(t, amax_masked) << "row " << r;
        continue;
      }
      ASSERT_GT(p_masked[static_cast<size_t>(t)], 0.0) << "row " << r << ": token " << t << " outside the mask/kept set";
      ++count[static_cast<size_t>(t)];
      ++n_masked_rows;
    }
    if (greedy) continue;
    for (int i = 0; i < V; ++i) {  // within 5 standard deviations of a binomial where the count is expected >= 50
      const double e = p_masked[static_cast<size_t>(i)] * n_masked_rows;
      if (e < 50) continue;
      EXPECT_NEAR(count[static_cast<size_t>(i)], e, 5 * std::sqrt(e * (1 - p_masked[static_cast<size_t>(i)])))
          << "token " << i;
    }
  }
}

}  // namespace
}  // namespace mopt
#endif
