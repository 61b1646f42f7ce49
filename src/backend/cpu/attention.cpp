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

constexpr int kChunk = 32;  // positions scored before one online-softmax update (a multiple of 8)

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

#ifdef MOPT_CPU_AVX2
// [sum(v[0]), ..., sum(v[7])]
inline __m256 hsum8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// score[i] = scale * q . k_i for n positions (k rows `stride` floats apart); score has room for n rounded up to 8.
void score_chunk(const float* q, const float* k, int64_t stride, int n, int D, float scale, float* score) {
#ifdef MOPT_CPU_AVX2
  if (D % 8 == 0) {
    int i0 = 0;
    for (; i0 + 8 <= n; i0 += 8) {  // 8 positions at a time: 8 independent FMA chains, one reduction
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      const float* kb = k + i0 * stride;
      for (int d = 0; d < D; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + j * stride + d), acc[j]);
      }
      _mm256_storeu_ps(score + i0, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
    }
    for (int i = i0; i < n; ++i) score[i] = vec_dot_f32(q, k + i * stride, D) * scale;
    return;
  }
#endif
  for (int i = 0; i < n; ++i) score[i] = vec_dot_f32(q, k + i * stride, D) * scale;
}

// acc[D] = acc * corr + sum_i p[i] * v_i.
void accumulate_chunk(float* acc, float corr, const float* p, const float* v, int64_t stride, int n, int D) {
#ifdef MOPT_CPU_AVX2
  if (D % 64 == 0) {  // 8 registers of accumulator stay live across the chunk
    const __m256 vc = _mm256_set1_ps(corr);
    for (int d0 = 0; d0 < D; d0 += 64) {
      __m256 r[8];
      for (int c = 0; c < 8; ++c) r[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + d0 + 8 * c), vc);
      for (int i = 0; i < n; ++i) {
        const __m256 pv = _mm256_broadcast_ss(p + i);
        const float* vi = v + i * stride + d0;
        for (int c = 0; c < 8; ++c) r[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vi + 8 * c), r[c]);
      }
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + d0 + 8 * c, r[c]);
    }
    return;
  }
#endif
  if (corr != 1.0f) vec_scale(acc, corr, D);
  for (int i = 0; i < n; ++i) vec_axpy(acc, p[i], v + i * stride, D);
}

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
    for (int g = 0; g < G; ++g) {
      float* sg = sc.score.data() + static_cast<size_t>(g) * kChunk;
      score_chunk(q + g * D, k, row_stride, n, D, a.scale, sg);
      float mx = m[g];
      for (int i = 0; i < n; ++i) mx = std::max(mx, sg[i]);
      const float corr = std::exp(m[g] - mx);  // exp(-inf) = 0 on the first chunk
      const float sum = vec_exp_sub_sum(sg, n, mx);
      accumulate_chunk(sc.acc.data() + static_cast<size_t>(g) * D, corr, sg, v, row_stride, n, D);
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
