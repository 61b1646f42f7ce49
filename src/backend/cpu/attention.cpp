// Paged causal attention on the CPU: one work item per (token, kv head); the query heads of a GQA group
// share every K/V row read. Online softmax over chunks of positions that lie in one cache block.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

constexpr int kChunk = 32;  // positions scored before one online-softmax update

// Sequence owning token t: query_start is non-decreasing with query_start[0] == 0.
int seq_of_token(const PagedAttnArgs& a, int t) {
  const int32_t* qs = a.query_start;
  const int32_t* it = std::upper_bound(qs, qs + a.n_seqs + 1, t);
  return static_cast<int>(it - qs) - 1;
}

struct Scratch {
  std::vector<float> acc;    // [G, head_dim]
  std::vector<float> score;  // [G, kChunk]
};

void attend_one(const PagedAttnArgs& a, int t, int hkv, Scratch& sc) {
  const int G = a.n_head / a.n_head_kv;
  const int D = a.head_dim;
  const int s = seq_of_token(a, t);
  MOPT_CHECK(s >= 0 && s < a.n_seqs && t < a.query_start[s + 1], "paged_attention: token %d has no sequence", t);
  const int p = a.positions[t];
  MOPT_CHECK(p >= 0 && p < a.seq_lens[s], "paged_attention: token %d position %d outside context %d", t, p,
             a.seq_lens[s]);
  const int start = a.sliding_window > 0 ? std::max(0, p - a.sliding_window + 1) : 0;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  const float* q = a.q + (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hkv) * G) * D;  // [G, D]
  float* out = a.out + (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hkv) * G) * D;    // [G, D]
  const int64_t row_stride = static_cast<int64_t>(a.n_head_kv) * D;  // floats between consecutive slots

  sc.acc.assign(static_cast<size_t>(G) * D, 0.0f);
  sc.score.resize(static_cast<size_t>(G) * kChunk);
  float m[256], l[256];  // [G] running max and denominator
  MOPT_CHECK(G <= 256, "paged_attention: GQA group %d too large", G);
  for (int g = 0; g < G; ++g) m[g] = -INFINITY, l[g] = 0.0f;

  for (int j0 = start; j0 <= p;) {
    // Chunk [j0, j1): same cache block, at most kChunk positions.
    const int bi = j0 / a.block_size;
    MOPT_CHECK(bi < a.max_blocks_per_seq, "paged_attention: position %d beyond the block table", j0);
    const int blk = table[bi];
    MOPT_CHECK(blk >= 0, "paged_attention: seq %d position %d has no cache block", s, j0);
    const int j1 = std::min({p + 1, (bi + 1) * a.block_size, j0 + kChunk});
    const int n = j1 - j0;
    const int64_t slot0 = static_cast<int64_t>(blk) * a.block_size + (j0 - bi * a.block_size);
    const float* k = a.k_cache + slot0 * row_stride + static_cast<int64_t>(hkv) * D;
    const float* v = a.v_cache + slot0 * row_stride + static_cast<int64_t>(hkv) * D;
    for (int i = 0; i < n; ++i)
      for (int g = 0; g < G; ++g)
        sc.score[static_cast<size_t>(g) * kChunk + i] = vec_dot_f32(q + g * D, k + i * row_stride, D) * a.scale;
    for (int g = 0; g < G; ++g) {
      float* sg = sc.score.data() + static_cast<size_t>(g) * kChunk;
      float mx = m[g];
      for (int i = 0; i < n; ++i) mx = std::max(mx, sg[i]);
      const float corr = std::exp(m[g] - mx);  // exp(-inf) = 0 on the first chunk
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) {
        sg[i] = std::exp(sg[i] - mx);
        sum += sg[i];
      }
      float* acc = sc.acc.data() + static_cast<size_t>(g) * D;
      if (corr != 1.0f) vec_scale(acc, corr, D);
      for (int i = 0; i < n; ++i) vec_axpy(acc, sg[i], v + i * row_stride, D);
      l[g] = l[g] * corr + sum;
      m[g] = mx;
    }
    j0 = j1;
  }
  for (int g = 0; g < G; ++g) {
    const float inv = l[g] > 0 ? 1.0f / l[g] : 0.0f;
    const float* acc = sc.acc.data() + static_cast<size_t>(g) * D;
    for (int d = 0; d < D; ++d) out[g * D + d] = acc[d] * inv;
  }
}

}  // namespace

void paged_attention(const PagedAttnArgs& a, ThreadPool* pool) {
  MOPT_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "paged_attention: heads %d / kv %d",
             a.n_head, a.n_head_kv);
  MOPT_CHECK(a.head_dim > 0 && a.block_size > 0 && a.n_seqs >= 0, "paged_attention: bad dims");
  if (a.n_seqs == 0) return;
  const int n_tokens = a.query_start[a.n_seqs];
  if (n_tokens <= 0) return;
  const int64_t n_items = static_cast<int64_t>(n_tokens) * a.n_head_kv;
  const int n_threads = pool ? pool->size() : 1;
  static thread_local std::vector<Scratch> scratch;  // per pool thread id, owned by the calling thread
  scratch.resize(static_cast<size_t>(std::max<int>(n_threads, static_cast<int>(scratch.size()))));
  Scratch* scr = scratch.data();
  parallel_items(pool, n_items, [&](int64_t item, int tid) {
    attend_one(a, static_cast<int>(item / a.n_head_kv), static_cast<int>(item % a.n_head_kv), scr[tid]);
  });
}

}  // namespace mopt::cpu
