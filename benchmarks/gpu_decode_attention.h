// The decode attention kernel alone (bench_gpu_decode's attention lines and --attn-sweep / --attn-large-sweep).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/kernels.h"
#include "gpu_attention_common.h"
#include "model/model.h"

namespace mopt::bench {

// The decode attention kernel alone on one layer of random KV (Llama-3.1-8B heads), a cache of C (bf16, or fp8
// with per-head scales): B sequences at context ctx (contiguous blocks of 16), n_splits CTAs per (token, head
// group), splits of at least min_slice tokens.
// Returns seconds per launch: the median over 20 timings of `back_to_back` consecutive launches each.
template <class C>
double time_decode_attention(const ModelConfig& c, int B, int ctx, int n_splits, int min_slice, int back_to_back,
                             int max_heads_per_cta) {
  const int bs = 16, nb = (ctx + bs - 1) / bs;
  const size_t q_elems = static_cast<size_t>(B) * c.n_head * c.head_dim;
  BenchKvCache<C> cache(static_cast<int64_t>(B) * nb, bs, c.n_head_kv, c.head_dim);
  cuda::bf16 *q = nullptr, *out = nullptr;
  int32_t* meta = nullptr;  // positions[B] token_seq[B] block_tables[B, nb]
  float* ws = nullptr;
  uint32_t* cnt = nullptr;
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&q), q_elems * 2), "cudaMalloc");
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&out), q_elems * 2), "cudaMalloc");
  const size_t meta_ints = 2 * static_cast<size_t>(B) + static_cast<size_t>(B) * nb;
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&meta), meta_ints * 4), "cudaMalloc");
  // Partials [B, n_head, n_splits, head_dim] and (max, sum) [B, n_head, n_splits, 2], fp32.
  const size_t ws_floats = q_elems * n_splits + static_cast<size_t>(B) * c.n_head * n_splits * 2;
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&ws), ws_floats * 4), "cudaMalloc");
  gpu_ck(cudaMalloc(reinterpret_cast<void**>(&cnt), static_cast<size_t>(B) * c.n_head * 4), "cudaMalloc");
  gpu_ck(cudaMemset(cnt, 0, static_cast<size_t>(B) * c.n_head * 4), "cudaMemset");
  gpu_ck(cuda::launch_fill_random(q, static_cast<int64_t>(q_elems), 4, 1.f, 0.f, nullptr), "fill");
  std::vector<int32_t> h(2 * static_cast<size_t>(B) + static_cast<size_t>(B) * nb);
  for (int s = 0; s < B; ++s) {
    h[s] = ctx - 1;
    h[B + s] = s;
    for (int j = 0; j < nb; ++j) h[2 * B + static_cast<size_t>(s) * nb + j] = s * nb + j;
  }
  gpu_ck(cudaMemcpy(meta, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  cuda::DecodeAttnParamsT<cuda::bf16, C> p;
  p.q = q;
  p.out = out;
  p.positions = meta;
  p.token_seq = meta + B;
  p.block_tables = meta + 2 * B;
  p.max_blocks_per_seq = nb;
  p.cache = cache.view;
  p.n_tokens = B;
  p.n_head = c.n_head;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  p.n_splits = n_splits;
  p.min_slice = min_slice;
  p.max_heads_per_cta = max_heads_per_cta;
  p.workspace = ws;
  p.counters = cnt;
  const double t =
      median_launch_seconds([&] { return cuda::launch_attention_decode(p, nullptr); }, back_to_back);
  cudaFree(q);
  cudaFree(out);
  cudaFree(meta);
  cudaFree(ws);
  cudaFree(cnt);
  return t;
}

}  // namespace mopt::bench
