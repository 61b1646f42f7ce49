// paged_attention vs naive contiguous attention (fp64 softmax) with random block tables, GQA ratios 1/2/4/8,
// head dims 4/8/12/64/128, block sizes 1/4/8/16/32, chunked queries (not starting at position 0), a full prefill,
// single-token decode, and sliding windows. Unused cache slots hold NaN, so reading any slot outside a
// token's causal window poisons the output. Threaded results must equal single-threaded ones bit for bit, and
// each sequence run alone must give its tokens the same bits as the whole batch (batch invariance).
// Both cache dtypes: fp16 caches hold the random K/V rounded to fp16, and the reference uses those rounded values
// (the kernel widens them exactly), so the tolerance is the same. Both K layouts: rows, and blocks stored
// transposed ([n_blocks, kvd, block_size], the CPU runner's), whose scores take 8 slots per vector with a scalar
// tail for windows starting or ending inside a block and block sizes below 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels_test_util.h"

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;

using Params = std::tuple<int /*G*/, int /*head_dim*/, int /*block_size*/, int /*window*/, bool /*fp16 cache*/,
                          bool /*K transposed*/>;

class KernelsAttention : public ::testing::TestWithParam<Params> {};

TEST_P(KernelsAttention, MatchesNaive) {
  const auto [G, D, bs, window, f16, kt] = GetParam();
  const int n_kv = 2, n_head = n_kv * G;
  const int kvd = n_kv * D;
  // Sequences: (context length after this step, new query tokens). Includes decode (1 query), a chunk
  // starting mid-sequence, and a full prefill.
  const std::vector<std::pair<int, int>> seqs = {{1, 1}, {37, 5}, {70, 70}, {45, 1}};
  const int n_seqs = static_cast<int>(seqs.size());
  int max_blocks = 0, total_blocks = 0, n_tokens = 0;
  for (auto [L, nq] : seqs) {
    max_blocks = std::max(max_blocks, (L + bs - 1) / bs);
    total_blocks += (L + bs - 1) / bs;
    n_tokens += nq;
  }
  const int n_blocks = total_blocks + 3;  // a few never-used blocks
  std::mt19937 rng(static_cast<uint32_t>(G * 1000 + D * 10 + bs + window));
  std::vector<int> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  std::vector<float> kc(static_cast<size_t>(n_blocks) * bs * kvd, NAN), vc(kc.size(), NAN);  // paged caches
  std::vector<int32_t> tables(static_cast<size_t>(n_seqs) * max_blocks, -1), qstart{0}, lens, positions;
  std::vector<std::vector<float>> K, V;  // per seq: [L, n_kv, D] contiguous
  int next = 0;
  for (int s = 0; s < n_seqs; ++s) {
    const auto [L, nq] = seqs[static_cast<size_t>(s)];
    for (int b = 0; b < (L + bs - 1) / bs; ++b) tables[static_cast<size_t>(s * max_blocks + b)] = perm[next++];
    K.push_back(random_vec(static_cast<size_t>(L) * kvd, 10 + s));
    V.push_back(random_vec(static_cast<size_t>(L) * kvd, 20 + s));
    if (f16)  // the values an fp16 cache holds
      for (auto* x : {&K.back(), &V.back()})
        for (float& v : *x) v = fp16_to_fp32(fp32_to_fp16(v));
    for (int j = 0; j < L; ++j) {
      const int64_t slot = static_cast<int64_t>(tables[static_cast<size_t>(s * max_blocks + j / bs)]) * bs + j % bs;
      std::copy_n(K[s].data() + static_cast<size_t>(j) * kvd, kvd, kc.data() + slot * kvd);
      std::copy_n(V[s].data() + static_cast<size_t>(j) * kvd, kvd, vc.data() + slot * kvd);
    }
    lens.push_back(L);
    qstart.push_back(qstart.back() + nq);
    for (int i = 0; i < nq; ++i) positions.push_back(L - nq + i);
  }
  auto q = random_vec(static_cast<size_t>(n_tokens) * n_head * D, 99);  // [n_tokens, n_head, D]
  std::vector<float> out(q.size(), -1.0f), out_mt(q.size(), -2.0f);

  if (kt) {  // K blocks transposed: element e of slot o of block b at (b * kvd + e) * bs + o
    std::vector<float> rows = kc;
    for (int b = 0; b < n_blocks; ++b)
      for (int o = 0; o < bs; ++o)
        for (int e = 0; e < kvd; ++e)
          kc[(static_cast<size_t>(b) * kvd + e) * bs + o] = rows[(static_cast<size_t>(b) * bs + o) * kvd + e];
  }
  std::vector<uint16_t> kh(kc.size()), vh(vc.size());  // fp16 copies (NaN stays NaN)
  for (size_t i = 0; i < kc.size(); ++i) kh[i] = fp32_to_fp16(kc[i]), vh[i] = fp32_to_fp16(vc[i]);

  PagedAttnArgs a;
  a.q = q.data();
  a.k_cache = f16 ? static_cast<const void*>(kh.data()) : kc.data();
  a.v_cache = f16 ? static_cast<const void*>(vh.data()) : vc.data();
  a.kv_dtype = f16 ? DType::F16 : DType::F32;
  a.k_transposed = kt;
  a.n_head = n_head;
  a.n_head_kv = n_kv;
  a.head_dim = D;
  a.block_size = bs;
  a.n_seqs = n_seqs;
  a.query_start = qstart.data();
  a.seq_lens = lens.data();
  a.positions = positions.data();
  a.block_tables = tables.data();
  a.max_blocks_per_seq = max_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.sliding_window = window;
  a.out = out.data();
  paged_attention(a, nullptr);
  ThreadPool pool(3);
  a.out = out_mt.data();
  paged_attention(a, &pool);

  // Each sequence alone: its own query rows, lengths, positions and block table row.
  std::vector<float> out_solo(q.size(), -3.0f);
  for (int s = 0; s < n_seqs; ++s) {
    const int32_t qs1[2] = {0, qstart[s + 1] - qstart[s]};
    PagedAttnArgs b = a;
    b.q = q.data() + static_cast<size_t>(qstart[s]) * n_head * D;
    b.out = out_solo.data() + static_cast<size_t>(qstart[s]) * n_head * D;
    b.n_seqs = 1;
    b.query_start = qs1;
    b.seq_lens = lens.data() + s;
    b.positions = positions.data() + qstart[s];
    b.block_tables = tables.data() + static_cast<size_t>(s) * max_blocks;
    paged_attention(b, s % 2 ? &pool : nullptr);
  }

  for (int s = 0; s < n_seqs; ++s) {
    for (int t = qstart[s]; t < qstart[s + 1]; ++t) {
      const int p = positions[static_cast<size_t>(t)];
      const int j0 = window > 0 ? std::max(0, p - window + 1) : 0;
      for (int h = 0; h < n_head; ++h) {
        const int hk = h / G;  // consecutive query heads share a KV head
        const float* qv = q.data() + (static_cast<size_t>(t) * n_head + h) * D;
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int j = j0; j <= p; ++j) {
          const float* kv = K[s].data() + static_cast<size_t>(j) * kvd + hk * D;
          double d = 0;
          for (int i = 0; i < D; ++i) d += static_cast<double>(qv[i]) * kv[i];
          sc.push_back(d * a.scale);
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int i = 0; i < D; ++i) {
          double want = 0;
          for (int j = j0; j <= p; ++j) want += sc[static_cast<size_t>(j - j0)] / sum * V[s][static_cast<size_t>(j) * kvd + hk * D + i];
          const size_t idx = (static_cast<size_t>(t) * n_head + h) * D + i;
          ASSERT_NEAR(out[idx], want, 2e-5) << "seq " << s << " token " << t << " head " << h << " dim " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(out[idx]), std::bit_cast<uint32_t>(out_mt[idx]));
          ASSERT_EQ(std::bit_cast<uint32_t>(out[idx]), std::bit_cast<uint32_t>(out_solo[idx]));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, KernelsAttention,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8), ::testing::Values(4, 8, 12, 64, 128),
                                            ::testing::Values(1, 4, 8, 16, 32), ::testing::Values(0, 6),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           char name[64];
                           std::snprintf(name, sizeof(name), "G%d_D%d_bs%d_win%d_%s_%s", std::get<0>(info.param),
                                         std::get<1>(info.param), std::get<2>(info.param), std::get<3>(info.param),
                                         std::get<4>(info.param) ? "f16" : "f32",
                                         std::get<5>(info.param) ? "kT" : "krow");
                           return std::string(name);
                         });

}  // namespace
}  // namespace mopt::cpu
