// The tensor-core prefill attention kernel alone (bench_gpu_decode --prefill-attn): one layer of random q and a
// random paged KV cache (contiguous blocks of 16; bf16, or fp8 with per-head scales), n_seqs fresh prompts of
// len tokens each, the tiles the runner plans (kPrefillTileRows rows, one sequence each).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/kernels.h"
#include "gpu_attention_common.h"

namespace mopt::bench {

struct PrefillAttnShape {
  int n_head = 32, n_head_kv = 8, head_dim = 128;
};

// Seconds per launch: the median of 20 timings of 5 back-to-back launches each (after 3 warm-up timings).
template <class C>
double time_prefill_attention(const PrefillAttnShape& s, int n_seqs, int len) {
  const int bs = 16, nb = (len + bs - 1) / bs, T = n_seqs * len;
  const size_t q_elems = static_cast<size_t>(T) * s.n_head * s.head_dim;
  BenchKvCache<C> cache(static_cast<int64_t>(n_seqs) * nb, bs, s.n_head_kv, s.head_dim);
  cuda::bf16 *q = nullptr, *out = nullptr;
  int32_t* meta = nullptr;
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&q), q_elems * 2), "malloc");
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&out), q_elems * 2), "malloc");
  gpu_ck(cuda::launch_fill_random(q, static_cast<int64_t>(q_elems), 4, 1.f, 0.f, nullptr), "fill");
  // Host metadata: positions [T], tiles (start, end, seq), block tables [n_seqs, nb].
  std::vector<int32_t> pos, ts, te, tq, bt;
  for (int sq = 0; sq < n_seqs; ++sq) {
    for (int i = 0; i < len; ++i) pos.push_back(i);
    for (int i = 0; i < len; i += cuda::kPrefillTileRows) {
      ts.push_back(sq * len + i);
      te.push_back(sq * len + std::min(len, i + cuda::kPrefillTileRows));
      tq.push_back(sq);
    }
    for (int j = 0; j < nb; ++j) bt.push_back(sq * nb + j);
  }
  std::vector<int32_t> h = pos;
  const size_t o_ts = h.size();
  h.insert(h.end(), ts.begin(), ts.end());
  const size_t o_te = h.size();
  h.insert(h.end(), te.begin(), te.end());
  const size_t o_tq = h.size();
  h.insert(h.end(), tq.begin(), tq.end());
  const size_t o_bt = h.size();
  h.insert(h.end(), bt.begin(), bt.end());
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&meta), h.size() * 4), "malloc");
  gpu_ck(cudaMemcpy(meta, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "copy");
  cuda::PrefillAttnParamsT<C> p;
  p.q = q;
  p.out = out;
  p.positions = meta;
  p.tile_start = meta + o_ts;
  p.tile_end = meta + o_te;
  p.tile_seq = meta + o_tq;
  p.block_tables = meta + o_bt;
  p.max_blocks_per_seq = nb;
  p.cache = cache.view;
  p.n_tiles = static_cast<int>(ts.size());
  p.n_head = s.n_head;
  p.scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  const double t = median_launch_seconds([&] { return cuda::launch_attention_prefill(p, nullptr); }, 5);
  cudaFree(q);
  cudaFree(out);
  cudaFree(meta);
  return t;
}

// Causal attention FLOPs of n_seqs fresh prompts of len tokens (S = Q K^T and P V over the visible keys).
inline double prefill_attention_flops(const PrefillAttnShape& s, int n_seqs, int len) {
  return 4.0 * n_seqs * s.n_head * s.head_dim * (static_cast<double>(len) * (len + 1) / 2);
}

// One line per (KV dtype, batch): us per layer, ms for `layers` layers, TFLOP/s.
inline void print_prefill_attention(int layers) {
  const PrefillAttnShape s;
  std::printf("prefill attention kernel alone (32/8 heads, head_dim 128), %d layers:\n", layers);
  for (bool fp8 : {false, true})
    for (auto [n, len] : {std::pair{1, 2048}, {4, 512}, {1, 8192}}) {
      const double t =
          fp8 ? time_prefill_attention<cuda::fp8>(s, n, len) : time_prefill_attention<cuda::bf16>(s, n, len);
      std::printf("  %-4s KV, %d x %5d tokens: %8.1f us/layer %7.2f ms/%d layers %6.0f TFLOP/s\n", fp8 ? "fp8" : "bf16",
                  n, len, t * 1e6, t * 1e3 * layers, layers, prefill_attention_flops(s, n, len) / t / 1e12);
    }
}

}  // namespace mopt::bench
