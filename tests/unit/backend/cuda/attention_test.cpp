// The attention kernels (decode / per-token and tensor-core prefill) against the CPU backend's paged attention
// (fp32) on exactly the same inputs, over swept shapes: head dims, GQA ratios, block sizes, contexts, splits,
// sliding windows, padding, repeated launches and CUDA graph replays; with caches of the compute type and fp8.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cuda/kernels.h"
#include "core/thread_pool.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cuda::bf16;
using cuda::fp8;
using cudatest::DevVec;
using cudatest::all_close;
using cudatest::dev;
using cudatest::dev_mut;
using cudatest::download_f32;
using cudatest::host_t;
using cudatest::kRtol;
using cudatest::random_vals;
using cudatest::tol;
using StorageTypes = testing::Types<bf16, float>;

struct AttnCase {
  int hd, n_head, n_kv, bs;
  std::vector<int> seq_lens;  // context after this step
  std::vector<int> q_lens;    // new tokens per sequence (<= seq_len)
  int window = 0;
  int n_pad = 0;            // decode only: padding tokens (position -1) appended to the batch; output zeros
};

// Decode kernel extras of run_attention_case: after the checked launch, relaunch eagerly and replay a captured
// CUDA graph `graph_replays` times, requiring bit-identical outputs and all merge counters back at zero.
struct RepeatCheck {
  bool enabled = false;
  int graph_replays = 3;
  int max_heads_per_cta = 0;  // DecodeAttnParamsT knobs of the small-batch path
  bool small_smem = false;
};

// Builds a random paged cache (blocks shuffled across sequences) in both layouts, runs the CUDA kernel(s)
// and compares with cpu::paged_attention. T: storage type of q and out (the prefill kernel: bf16); C: of the
// cache, T or fp8. fp8: every KV head gets its own K and V scale (spread over ~2 decades, so that stored values
// reach from E4M3's subnormals to near 448); the cache holds e4m3ref::encode(x / scale) and the reference sees
// exactly e4m3ref::decode(byte) * scale, so the kernels' dequantization is checked at the bf16 tolerances.
template <class T, class C = T>
void run_attention_case(const AttnCase& c, bool prefill_kernel, int n_splits, std::mt19937& rng,
                        RepeatCheck repeat = {}) {
  constexpr bool kFp8 = std::is_same_v<C, cuda::fp8>;
  const int S = static_cast<int>(c.seq_lens.size());
  int max_blocks = 0, total_blocks = 0, n_tok = 0;
  std::vector<int> qs(1, 0);
  for (int s = 0; s < S; ++s) {
    const int nb = (c.seq_lens[s] + c.bs - 1) / c.bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    n_tok += c.q_lens[s];
    qs.push_back(n_tok);
  }
  const int n_blocks = total_blocks + 3;
  std::vector<int> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> bt(static_cast<size_t>(S) * max_blocks, -1);
  int next = 0;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < (c.seq_lens[s] + c.bs - 1) / c.bs; ++j) bt[static_cast<size_t>(s) * max_blocks + j] = perm[next++];
  const int kvd = c.n_kv * c.hd;
  // GPU layout, one layer: [n_blocks][2][n_kv][bs][hd]; CPU layout: [n_blocks][bs][n_kv][hd] for K and V.
  const int64_t kv_stride = static_cast<int64_t>(c.n_kv) * c.bs * c.hd, block_stride = 2 * kv_stride;
  std::vector<host_t<C>> gcache(static_cast<size_t>(n_blocks * block_stride));
  std::vector<float> kc(static_cast<size_t>(n_blocks) * c.bs * kvd, 0.f), vc(kc.size(), 0.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> scales(2 * static_cast<size_t>(c.n_kv), 1.f);  // [K | V][n_kv] (fp8)
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = std::ldexp(1.f, -static_cast<int>(i % 7)) * 1.3f;
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < c.n_kv; ++h)
        for (int o = 0; o < c.bs; ++o)
          for (int d = 0; d < c.hd; ++d) {
            const float x = u(rng) * (kv == 0 ? 2.f : 1.f);
            const float s = kFp8 ? scales[static_cast<size_t>(kv * c.n_kv + h)] : 1.f;
            const host_t<C> bits = cudatest::Storage<C>::from(x / s);
            gcache[static_cast<size_t>(b * block_stride + kv * kv_stride + (h * c.bs + o) * c.hd + d)] = bits;
            (kv == 0 ? kc : vc)[static_cast<size_t>(((b * c.bs + o) * c.n_kv + h) * c.hd + d)] =
                cudatest::Storage<C>::to(bits) * s;
          }
  std::vector<int32_t> positions, token_seq;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < c.q_lens[s]; ++i) {
      positions.push_back(c.seq_lens[s] - c.q_lens[s] + i);
      token_seq.push_back(s);
    }
  const int n_real = n_tok;  // tokens the CPU reference computes; padding follows
  ASSERT_TRUE(c.n_pad == 0 || !prefill_kernel);
  for (int i = 0; i < c.n_pad; ++i) {
    positions.push_back(-1);
    token_seq.push_back(0);
  }
  n_tok += c.n_pad;
  std::vector<host_t<T>> qb;
  std::vector<float> qv;
  random_vals<T>(rng, static_cast<size_t>(n_tok) * c.n_head * c.hd, -1.f, 1.f, qb, qv);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.hd));

  std::vector<float> ref(qv.size());
  cpu::PagedAttnArgs a{};
  a.q = qv.data();
  a.out = ref.data();
  a.k_cache = kc.data();
  a.v_cache = vc.data();
  a.n_head = c.n_head;
  a.n_head_kv = c.n_kv;
  a.head_dim = c.hd;
  a.block_size = c.bs;
  a.n_seqs = S;
  a.query_start = qs.data();
  a.seq_lens = c.seq_lens.data();
  a.positions = positions.data();
  a.block_tables = bt.data();
  a.max_blocks_per_seq = max_blocks;
  a.scale = scale;
  a.sliding_window = c.window;
  static ThreadPool pool(0);  // the CPU reference of long prompts is the slow part of this test
  cpu::paged_attention(a, &pool);  // rows of the n_real tokens; padding rows stay 0
  ASSERT_EQ(ref.size(), static_cast<size_t>(n_tok) * c.n_head * c.hd);
  (void)n_real;

  DevVec<host_t<C>> dcache(gcache);
  DevVec<host_t<T>> dq(qb), dout(qb.size());
  DevVec<float> dscales(scales);
  DevVec<int32_t> dpos(positions), dseq(token_seq), dbt(bt);
  DevVec<float> dws(static_cast<size_t>(n_tok) * c.n_head * std::max(n_splits, 1) * (c.hd + 2));
  DevVec<uint32_t> dcnt(static_cast<size_t>(n_tok) * c.n_head);
  CUDA_OK(cudaMemset(dcnt.get(), 0, dcnt.size() * sizeof(uint32_t)));
  dout.poison();
  cuda::KvCacheViewT<C> cv;
  cv.k = dev_mut<C>(dcache);
  cv.v = cv.k + kv_stride;
  cv.block_stride = block_stride;
  cv.block_size = c.bs;
  cv.n_head_kv = c.n_kv;
  cv.head_dim = c.hd;
  if (kFp8) {
    cv.k_scale = dscales.get();
    cv.v_scale = dscales.get() + c.n_kv;
  }
  if (prefill_kernel) {
    if constexpr (!std::is_same_v<T, bf16>) {
      ADD_FAILURE() << "the tensor-core prefill kernel is bf16 only";
      return;
    } else {
    std::vector<int32_t> ts, te, tq;
    for (int s = 0; s < S; ++s)
      for (int i = qs[s]; i < qs[s + 1]; i += cuda::kPrefillTileRows) {
        ts.push_back(i);
        te.push_back(std::min(qs[s + 1], i + cuda::kPrefillTileRows));
        tq.push_back(s);
      }
    DevVec<int32_t> dts(ts), dte(te), dtq(tq);
    cuda::PrefillAttnParamsT<C> p;
    p.q = dev<T>(dq);
    p.out = dev_mut<T>(dout);
    p.positions = dpos.get();
    p.tile_start = dts.get();
    p.tile_end = dte.get();
    p.tile_seq = dtq.get();
    p.block_tables = dbt.get();
    p.max_blocks_per_seq = max_blocks;
    p.cache = cv;
    p.n_tiles = static_cast<int>(ts.size());
    p.n_head = c.n_head;
    p.window = c.window;
    p.scale = scale;
    CUDA_OK(cuda::launch_attention_prefill(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    }
  } else {
    cuda::DecodeAttnParamsT<T, C> p;
    p.q = dev<T>(dq);
    p.out = dev_mut<T>(dout);
    p.positions = dpos.get();
    p.token_seq = dseq.get();
    p.block_tables = dbt.get();
    p.max_blocks_per_seq = max_blocks;
    p.cache = cv;
    p.n_tokens = n_tok;
    p.n_head = c.n_head;
    p.window = c.window;
    p.scale = scale;
    p.n_splits = n_splits;
    p.max_heads_per_cta = repeat.max_heads_per_cta;
    p.small_smem = repeat.small_smem;
    p.workspace = dws.get();
    p.counters = dcnt.get();
    CUDA_OK(cuda::launch_attention_decode(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    if (repeat.enabled) {
      const std::vector<host_t<T>> first = dout.download();
      auto expect_same = [&](const char* what) {
        const std::vector<host_t<T>> again = dout.download();
        EXPECT_TRUE(std::memcmp(again.data(), first.data(), first.size() * sizeof(host_t<T>)) == 0) << what;
        const std::vector<uint32_t> cnt = dcnt.download();
        EXPECT_TRUE(std::all_of(cnt.begin(), cnt.end(), [](uint32_t v) { return v == 0; }))
            << what << ": merge counters not reset";
      };
      expect_same("first launch");
      dout.poison();
      CUDA_OK(cuda::launch_attention_decode(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      expect_same("second eager launch");
      cudaStream_t st = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      const cudaError_t launched = cuda::launch_attention_decode(p, st);
      CUDA_OK(cudaStreamEndCapture(st, &graph));
      CUDA_OK(launched);
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int r = 0; r < repeat.graph_replays; ++r) {
        dout.poison();
        CUDA_OK(cudaGraphLaunch(exec, st));
        CUDA_OK(cudaStreamSynchronize(st));
        expect_same("graph replay");
      }
      // Back-to-back replays without a host sync in between (each waits for the previous in stream order).
      dout.poison();
      for (int r = 0; r < repeat.graph_replays; ++r) CUDA_OK(cudaGraphLaunch(exec, st));
      CUDA_OK(cudaStreamSynchronize(st));
      expect_same("back-to-back graph replays");
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(st);
    }
  }
  // Decode keeps probabilities in fp32 (bf16 output rounding only); prefill feeds P to the tensor cores in
  // bf16 (relative 2^-9 per weight), so it gets a slightly looser absolute term. Outputs are O(1).
  // fp32 storage: only summation order and exp2f vs the CPU's exp differ: 2e-5 + 1e-5 relative.
  const float atol = prefill_kernel ? 1.5e-2f : tol<T>(4e-3f, 2e-5f);
  EXPECT_TRUE(all_close(download_f32<T>(dout), ref, atol, kRtol<T>));
}

template <class T>
class CudaAttentionT : public testing::Test {};
TYPED_TEST_SUITE(CudaAttentionT, StorageTypes, cudatest::StorageName);

TYPED_TEST(CudaAttentionT, DecodeSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  for (int hd : {8, 32, 64, 128, 256})
    for (auto [nh, nkv] : {std::pair{8, 8}, {8, 2}, {32, 8}, {28, 4}, {32, 2}})  // GQA 1, 4, 4, 7, 16
      for (int bs : {16, 32})
        for (int splits : {1, 3, 16}) {
          AttnCase c{hd, nh, nkv, bs, {1, 37, 300, 1000, 17}, {1, 1, 1, 1, 1}, 0};
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " splits " << splits);
          run_attention_case<TypeParam>(c, false, splits, rng);
        }
}

TYPED_TEST(CudaAttentionT, DecodeSlidingWindowAndLongContext) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  for (int splits : {1, 8}) {
    AttnCase c{128, 32, 8, 16, {5000, 70}, {1, 1}, 64};
    run_attention_case<TypeParam>(c, false, splits, rng);
    AttnCase d{64, 8, 2, 16, {6000}, {1}, 0};
    run_attention_case<TypeParam>(d, false, splits, rng);
  }
}

// The split merge inside the kernel: many splits (up to kDecodeMaxSplits), contexts shorter than one slice
// (one split used: direct write), exactly one and just over one slice, padding tokens; repeated launches and a
// CUDA graph replayed several times must give bit-identical outputs and leave every merge counter at zero.
TYPED_TEST(CudaAttentionT, DecodeInKernelMergeAndRepeats) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const int slice = cuda::kDecodeMinSliceTokens;
  RepeatCheck rep;
  rep.enabled = true;
  for (int splits : {2, 5, 16, cuda::kDecodeMaxSplits})
    for (auto [hd, nh, nkv] : {std::tuple{128, 32, 8}, {64, 16, 2}, {32, 4, 4}}) {
      SCOPED_TRACE(testing::Message() << "splits " << splits << " hd " << hd << " heads " << nh << "/" << nkv);
      AttnCase c{hd, nh, nkv, 16,
                 {1, 9, slice - 1, slice, slice + 1, 3 * slice + 5, 40 * slice + 3, 5000},
                 {1, 1, 1, 1, 1, 1, 1, 1}, 0, 2};
      run_attention_case<TypeParam>(c, false, splits, rng, rep);
    }
  // Sliding window: the window, not the position, decides the splits used.
  AttnCase w{128, 32, 8, 32, {6000, 300, 40}, {1, 1, 1}, 200, 1};
  run_attention_case<TypeParam>(w, false, cuda::kDecodeMaxSplits, rng, rep);
}

// The small-batch configuration (what the fused decode path launches): at most 1 or 2 query heads per CTA, the
// shallow pipeline; GQA groups of 1..7 (odd groups fall back to 1 head per CTA), several splits, repeats.
TYPED_TEST(CudaAttentionT, DecodeSmallBatchConfiguration) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  for (int hpc : {1, 2, 4})
    for (bool small : {true, false})
      for (auto [hd, nh, nkv] : {std::tuple{128, 32, 8}, {64, 28, 4}, {128, 8, 8}, {8, 8, 4}}) {
        SCOPED_TRACE(testing::Message() << "max heads per CTA " << hpc << " small " << small << " hd " << hd
                                        << " heads " << nh << "/" << nkv);
        RepeatCheck rep;
        rep.enabled = true;
        rep.graph_replays = 2;
        rep.max_heads_per_cta = hpc;
        rep.small_smem = small;
        AttnCase c{hd, nh, nkv, 16, {1, 33, 150, 700, 2100}, {1, 1, 1, 1, 1}, 0, 1};
        run_attention_case<TypeParam>(c, false, 16, rng, rep);
      }
}

TEST(CudaAttention, DecodeSplitsUsed) {
  const int slice = cuda::kDecodeMinSliceTokens;
  EXPECT_EQ(cuda::decode_splits_used(0, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(1, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(slice, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(slice + 1, 16), 2);
  EXPECT_EQ(cuda::decode_splits_used(100 * slice, 16), 16);
  EXPECT_EQ(cuda::decode_splits_used(100 * slice, 1), 1);
}

// The per-token kernel also serves prefill for head dims without a tensor-core kernel, and all prefill in fp32.
TYPED_TEST(CudaAttentionT, PerTokenKernelOnPrefillBatches) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (int hd : {8, 64, 128, 256}) {
    AttnCase c{hd, 8, 4, 16, {20, 100, 64}, {20, 30, 1}, 0};
    run_attention_case<TypeParam>(c, false, 1, rng);
    run_attention_case<TypeParam>(c, false, 4, rng);
  }
}

TEST(CudaAttention, PrefillSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  for (int hd : {64, 128})
    for (auto [nh, nkv] : {std::pair{4, 4}, {8, 2}, {16, 2}})
      for (int bs : {16, 64})
        for (int window : {0, 48}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " window " << window);
          // Fresh prompts, chunked prefill continuing a cached prefix, a decode token in the same batch.
          AttnCase c{hd, nh, nkv, bs, {130, 17, 250, 64, 9}, {130, 17, 100, 1, 9}, window};
          run_attention_case<bf16>(c, true, 1, rng);
        }
}

TEST(CudaAttention, PrefillLongPrompt) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  AttnCase c{128, 32, 8, 16, {2048}, {2048}, 0};
  run_attention_case<bf16>(c, true, 1, rng);
}

// The prefill kernel's tiling boundaries, with a cache of C: query counts and prefix contexts that are not
// multiples of the 64-row / 64-key tiles (1, 63, 65, 129 query rows; prefixes of 63, 64 and 379 cached tokens),
// several sequences in one batch, GQA groups of 1, 2, 3 and 4 (odd groups take one query head per CTA, even
// ones two), a block size that is not a power of two (24), a sliding window that starts inside a key tile.
template <class C>
void prefill_tiling_sweep(std::mt19937& rng) {
  for (int hd : {64, 128})
    for (auto [nh, nkv] : {std::pair{4, 4}, {8, 4}, {12, 4}, {32, 8}})
      for (int bs : {24, 32})
        for (int window : {0, 100}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " window " << window);
          AttnCase c{hd, nh, nkv, bs, {1, 63, 65, 200, 129, 700, 128}, {1, 63, 65, 137, 1, 321, 64}, window};
          run_attention_case<bf16, C>(c, true, 1, rng);
        }
}

TEST(CudaAttention, PrefillTilingBoundaries) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  prefill_tiling_sweep<bf16>(rng);
}

// ---- fp8 (E4M3) KV cache --------------------------------------------------------------------------------
// Decode (per-token kernel, bf16 q/out) and prefill (tensor cores) reading an fp8 cache: head dims 64 / 128
// (and 32 for the per-token kernel), GQA 1..8, contexts from 1 token to several splits, block sizes 1 / 16.

TEST(CudaAttentionFp8, DecodeSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  for (int hd : {32, 64, 128})
    for (auto [nh, nkv] : {std::pair{4, 4}, {8, 2}, {16, 2}, {12, 4}})  // GQA 1, 4, 8, 3
      for (int bs : {1, 16})
        for (int splits : {1, 4}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " splits " << splits);
          AttnCase c{hd, nh, nkv, bs, {1, 7, 33, 100, 300}, {1, 1, 1, 1, 1}, 0, 2};
          run_attention_case<bf16, fp8>(c, false, splits, rng);
        }
}

TEST(CudaAttentionFp8, DecodeRepeatsSmallBatchAndWindow) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(22);
  AttnCase c{128, 32, 8, 16, {1, 40, 700, 1300}, {1, 1, 1, 1}, 0, 1};
  run_attention_case<bf16, fp8>(c, false, 16, rng, RepeatCheck{.enabled = true});
  run_attention_case<bf16, fp8>(c, false, 8, rng, RepeatCheck{.max_heads_per_cta = 2, .small_smem = true});
  c.window = 64;
  run_attention_case<bf16, fp8>(c, false, 8, rng);
}

// The large-batch shape of the tensor-core decode kernel (head_dim 128, 4 heads per CTA) for cache type C: many
// sequences, contexts up to 1,501 tokens (partial 64-token tiles, warps with nothing in the slice), 1 to 8
// splits, repeats and a window.
template <class C>
void decode_large_batch_tensor_cores(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> lens;
  for (int i = 0; i < 24; ++i) lens.push_back(i % 3 == 0 ? 1501 : 1 + (i * 97) % 1500);
  AttnCase c{128, 32, 8, 16, lens, std::vector<int>(lens.size(), 1), 0, 2};
  for (int splits : {1, 3, 8}) {
    SCOPED_TRACE(testing::Message() << "splits " << splits);
    run_attention_case<bf16, C>(c, false, splits, rng, RepeatCheck{.enabled = true, .graph_replays = 2});
  }
  c.window = 500;
  run_attention_case<bf16, C>(c, false, 8, rng);
  AttnCase b{128, 32, 8, 32, lens, std::vector<int>(lens.size(), 1), 0, 2};  // another block size
  run_attention_case<bf16, C>(b, false, 3, rng);
}

TEST(CudaAttention, DecodeLargeBatchTensorCores) {
  SKIP_WITHOUT_GPU();
  decode_large_batch_tensor_cores<bf16>(26);
}

TEST(CudaAttentionFp8, DecodeLargeBatchTensorCores) {
  SKIP_WITHOUT_GPU();
  decode_large_batch_tensor_cores<fp8>(25);
}

TEST(CudaAttentionFp8, PerTokenKernelOnPrefillBatches) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(23);
  AttnCase c{64, 8, 2, 16, {70, 5, 33}, {70, 2, 10}, 0};
  run_attention_case<bf16, fp8>(c, false, 4, rng);
}

TEST(CudaAttentionFp8, PrefillSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(24);
  for (int hd : {64, 128})
    for (auto [nh, nkv] : {std::pair{4, 4}, {8, 2}, {16, 2}})
      for (int bs : {1, 16})
        for (int window : {0, 48}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " window " << window);
          AttnCase c{hd, nh, nkv, bs, {130, 17, 250, 64, 9}, {130, 17, 100, 1, 9}, window};
          run_attention_case<bf16, fp8>(c, true, 1, rng);
        }
}

TEST(CudaAttentionFp8, PrefillTilingBoundaries) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(26);
  prefill_tiling_sweep<fp8>(rng);
}

// The benchmark's shape (Llama-3.1-8B heads) on an fp8 cache, after a 100-token cached prefix.
TEST(CudaAttentionFp8, PrefillLongPrompt) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(27);
  AttnCase c{128, 32, 8, 16, {2148}, {2048}, 0};
  run_attention_case<bf16, fp8>(c, true, 1, rng);
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
