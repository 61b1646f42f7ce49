// Paged causal attention on the CPU: one work item per token (or per (token, kv head) when there are few
// tokens); the G query heads of a GQA group share every K/V row read. Two passes over the token's window
// [start, p] of its sequence:
//   1. offsets of the window's K/V rows through the block table, then scores s[g][i] = scale * q_g . k_i,
//      8 positions at a time: with K rows (8 independent FMA chains over head_dim, one transposing reduction)
//      or, with K blocks stored transposed (k_transposed, the CPU runner's layout), one FMA per dimension
//      over 8 consecutive slots of a block (no horizontal sums);
//   2. softmax (max, vectorized exp, sum) and out_g = (sum_i e[g][i] * v_i) / sum, the V rows applied to
//      up to kGroup query heads per pass with kParts interleaved partial sums per output vector.
//
// Cache element types (PagedAttnArgs::kv_dtype): fp32, or fp16 widened exactly to fp32 on load (F16C), after
// which the arithmetic is the same; fp16 halves the bytes a long batch streams through the caches.
//
// Batch invariance: every value a token's output depends on is computed by one fixed expression of that
// token's own data, whatever the batch around it, its block ids or the thread count. The score of position i
// is the same per-lane arithmetic in whichever lane it lands; the exp sum and each partial sum of the V
// accumulation take positions in window order, partial i % kParts, so only the window length shapes them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "core/dtype.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

constexpr int kParts = 4;  // interleaved partial sums of the V accumulation (latency hiding)
constexpr int kGroup = 2;  // query heads sharing one pass over the V rows (kGroup * kParts accumulators)
constexpr int kPrefetch = 64;  // positions ahead whose K rows are prefetched while scoring (~ memory latency)

// Sequence owning token t: query_start is non-decreasing with query_start[0] == 0.
int seq_of_token(const PagedAttnArgs& a, int t) {
  const int32_t* qs = a.query_start;
  const int32_t* it = std::upper_bound(qs, qs + a.n_seqs + 1, t);
  return static_cast<int>(it - qs) - 1;
}

struct Scratch {
  std::vector<int64_t> off;  // [n8] float offset of window position i's row (kv head included) in a cache layer
  std::vector<float> score;  // [G, n8] scores, then exp(score - max)
  const int32_t* table = nullptr;  // block table row of the token's sequence
  int start = 0;                   // first window position
};

// One cache element as fp32 (exact for both types).
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) {
#ifdef MOPT_CPU_AVX2
  return _cvtsh_ss(*p);
#else
  return fp16_to_fp32(*p);
#endif
}

#ifdef MOPT_CPU_AVX2
// Eight consecutive cache elements as fp32.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// [sum(v[0]), ..., sum(v[7])]; lane i is ((v_i0+v_i1)+(v_i2+v_i3)) + ((v_i4+v_i5)+(v_i6+v_i7)) for every i.
inline __m256 hsum8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// score[0..8) = scale * q . k_i for the 8 rows k + off[i]; D a multiple of 8.
template <class T>
inline void score8(const float* q, const T* k, const int64_t* off, int D, __m256 scale, float* score) {
  __m256 acc[8];
  const __m256 q0 = _mm256_loadu_ps(q);
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_mul_ps(q0, load8(k + off[i]));
  for (int d = 8; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qv, load8(k + off[i] + d), acc[i]);
  }
  _mm256_storeu_ps(score, _mm256_mul_ps(hsum8(acc), scale));
}

// out[gi][d0..d0+8) = inv[gi] * sum_i e[gi][i] * v_{off[i]}[d0..d0+8) for NG (1..kGroup) heads.
template <int NG, class T>
inline void apply_v8(const float* const* e, const T* v, const int64_t* off, int n, int d0, const float* inv,
                     float* const* out) {
  __m256 acc[NG][kParts];
  for (int g = 0; g < NG; ++g)
    for (int c = 0; c < kParts; ++c) acc[g][c] = _mm256_setzero_ps();
  int i = 0;
  for (; i + kParts <= n; i += kParts)
    for (int c = 0; c < kParts; ++c) {
      const __m256 vv = load8(v + off[i + c] + d0);
      for (int g = 0; g < NG; ++g) acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(e[g] + i + c), vv, acc[g][c]);
    }
  for (int c = 0; c < kParts - 1; ++c) {  // tail: position i + c still goes to partial (i + c) % kParts
    if (i + c >= n) break;
    const __m256 vv = load8(v + off[i + c] + d0);
    for (int g = 0; g < NG; ++g) acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(e[g] + i + c), vv, acc[g][c]);
  }
  for (int g = 0; g < NG; ++g) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[g][0], acc[g][1]), _mm256_add_ps(acc[g][2], acc[g][3]));
    _mm256_storeu_ps(out[g] + d0, _mm256_mul_ps(s, _mm256_set1_ps(inv[g])));
  }
}
static_assert(kParts == 4, "apply_v8 combines exactly four partial sums");
#endif

#ifdef MOPT_CPU_AVX2
// acc[g][c] = fma chain over d of q[g][d] * k[d * bs + 8 c + lane] for NG query heads and NC vectors of 8
// consecutive slots of a transposed K block: NG * NC independent chains hide the FMA latency.
template <int NG, int NC, class T>
inline void dot_kt(const float* const* q, const T* k, int D, int bs, __m256 acc[NG][NC]) {
  for (int c = 0; c < NC; ++c) {
    const __m256 kv = load8(k + 8 * c);
    for (int g = 0; g < NG; ++g) acc[g][c] = _mm256_mul_ps(_mm256_broadcast_ss(q[g]), kv);
  }
  for (int d = 1; d < D; ++d)
    for (int c = 0; c < NC; ++c) {
      const __m256 kv = load8(k + static_cast<int64_t>(d) * bs + 8 * c);
      for (int g = 0; g < NG; ++g) acc[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[g] + d), kv, acc[g][c]);
    }
}
#endif

// Scores of NG (1..kGroup) query heads q[g] over the window [start, start + n) with K blocks stored transposed
// (PagedAttnArgs::k_transposed) into s[g]: s[g][i] = scale * fma(q[D-1], k[D-1], ... fma(q[1], k[1], q[0] * k[0]))
// for every position, in whichever vector lane or scalar tail it lands (bit-identical either way). k_head: the kv
// head's [D, bs] part of block 0. prefetch_v: fetch the V rows v_base + off[i] for pass 2; K is fetched
// ~kPrefetch positions ahead.
template <int NG, class T>
void scores_kt(const PagedAttnArgs& a, const Scratch& sc, int n, const T* k_head, const T* v_base,
               const float* const* q, bool prefetch_v, float* const* s) {
  const int bs = a.block_size, D = a.head_dim;
  const int64_t blk_elems = static_cast<int64_t>(bs) * a.n_head_kv * D;
  const int end = sc.start + n;
  for (int j = sc.start; j < end;) {
    const int bi = j / bs;
    const int o1 = std::min(bs, end - bi * bs);  // block offsets [j - bi * bs, o1) are in the window
    const T* kb = k_head + sc.table[bi] * blk_elems;  // [D, bs]
    const int o0 = j - bi * bs;
    const int64_t i0 = j - sc.start;  // window index of block offset o0
    int o = o0;
#ifdef MOPT_CPU_AVX2
    {  // entering block bi: fetch block bi + ahead (at the window's start, blocks bi .. bi + ahead)
      const int ahead = std::max(1, kPrefetch / bs);
      const int64_t head_bytes = static_cast<int64_t>(D) * bs * static_cast<int64_t>(sizeof(T));
      for (int b = j == sc.start ? bi : bi + ahead; b <= bi + ahead && b * bs < end; ++b) {
        const char* kp = reinterpret_cast<const char*>(k_head + sc.table[b] * blk_elems);
        for (int64_t byte = 0; byte < head_bytes; byte += 64) _mm_prefetch(kp + byte, _MM_HINT_T0);
      }
    }
    if (prefetch_v)
      for (int64_t i = i0; i < i0 + (o1 - o0); ++i)
        _mm_prefetch(reinterpret_cast<const char*>(v_base + sc.off[i]), _MM_HINT_T0);
    const __m256 vs = _mm256_set1_ps(a.scale);
    for (; o + 16 <= o1; o += 16) {
      __m256 acc[NG][2];
      dot_kt<NG, 2>(q, kb + o, D, bs, acc);
      for (int g = 0; g < NG; ++g)
        for (int c = 0; c < 2; ++c) _mm256_storeu_ps(s[g] + i0 + (o - o0) + 8 * c, _mm256_mul_ps(acc[g][c], vs));
    }
    for (; o < o1 && o + 8 <= bs; o += 8) {  // 8 slots, the last ones possibly past the window (lanes dropped)
      __m256 acc1[NG][1];
      dot_kt<NG, 1>(q, kb + o, D, bs, acc1);
      const int m = std::min(8, o1 - o);
      for (int g = 0; g < NG; ++g) {
        alignas(32) float lanes[8];  // lanes past the window read slots of this block that may hold anything
        _mm256_store_ps(lanes, _mm256_mul_ps(acc1[g][0], vs));
        for (int l = 0; l < m; ++l) s[g][i0 + (o - o0) + l] = lanes[l];
      }
    }
    o = std::min(o, o1);
#endif
    for (; o < o1; ++o)  // block sizes below 8 and a block's last slots when its size is no multiple of 8
      for (int g = 0; g < NG; ++g) {
        float acc1 = q[g][0] * load1(kb + o);
        for (int d = 1; d < D; ++d) acc1 = std::fma(q[g][d], load1(kb + static_cast<int64_t>(d) * bs + o), acc1);
        s[g][i0 + (o - o0)] = acc1 * a.scale;
      }
    j = bi * bs + o1;
  }
}

// Max of x[0..n).
float max_of(const float* x, int n) {
  float m = -INFINITY;
  int i = 0;
#ifdef MOPT_CPU_AVX2
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    m = _mm_cvtss_f32(h);
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Query heads of kv head hkv of token t over the n window rows at sc.off (padded to a multiple of 8).
// prefetch: issue prefetches for this head's rows (false when an earlier head of the item shares its cache lines).
// T: cache element type (float or uint16_t fp16 bits).
template <class T>
void attend_head(const PagedAttnArgs& a, int t, int hkv, int n, bool prefetch, Scratch& sc) {
  const int G = a.n_head / a.n_head_kv;
  const int D = a.head_dim;
  const int n8 = (n + 7) & ~7;
  const int64_t* off = sc.off.data();
  const T* k_base = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(hkv) * D;  // kv head hkv's row at off[i]
  const T* v_base = static_cast<const T*>(a.v_cache) + static_cast<int64_t>(hkv) * D;
  const float* q = a.q + (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hkv) * G) * D;  // [G, D]
  float* out = a.out + (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hkv) * G) * D;    // [G, D]

  // Pass 1: scores, max, exp and sums per query head.
  float inv[256];  // [G] 1 / softmax denominator
  MOPT_CHECK(G <= 256, "paged_attention: GQA group %d too large", G);
  if (a.k_transposed) {  // query heads g, g + 1 together
    const T* k_head = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(hkv) * D * a.block_size;
    for (int g = 0; g < G; g += kGroup) {
      const float* qs[kGroup] = {q + static_cast<int64_t>(g) * D, q + static_cast<int64_t>(g + 1) * D};
      float* ss[kGroup] = {sc.score.data() + static_cast<size_t>(g) * n8, sc.score.data() + static_cast<size_t>(g + 1) * n8};
      if (g + 1 < G) scores_kt<2>(a, sc, n, k_head, v_base, qs, prefetch && g == 0, ss);
      else scores_kt<1>(a, sc, n, k_head, v_base, qs, prefetch && g == 0, ss);
    }
  }
  for (int g = 0; g < G; ++g) {
    float* sg = sc.score.data() + static_cast<size_t>(g) * n8;
    const float* qg = q + static_cast<int64_t>(g) * D;
    if (a.k_transposed) {
      // scored above
    } else
#ifdef MOPT_CPU_AVX2
    if (D % 8 == 0) {
      const __m256 vs = _mm256_set1_ps(a.scale);
      for (int i = 0; i < n8; i += 8) {
        if (prefetch && g == 0) {  // the rows are scattered over cache blocks: fetch K ahead, and V for pass 2
          for (int j = i + kPrefetch; j < std::min(n, i + kPrefetch + 8); ++j)
            _mm_prefetch(reinterpret_cast<const char*>(k_base + off[j]), _MM_HINT_T0);
          for (int j = i; j < std::min(n, i + 8); ++j)
            _mm_prefetch(reinterpret_cast<const char*>(v_base + off[j]), _MM_HINT_T0);
        }
        score8(qg, k_base, off + i, D, vs, sg + i);
      }
    } else
#endif
    {
      for (int i = 0; i < n; ++i) {
        const T* k = k_base + off[i];
        float d = 0.0f;
        for (int e = 0; e < D; ++e) d += qg[e] * load1(k + e);
        sg[i] = d * a.scale;
      }
    }
    const float mx = max_of(sg, n);
#ifdef MOPT_CPU_AVX512_PATHS
    const float sum = cpu_has_avx512f() ? vec_exp_sub_sum_avx512(sg, n, mx) : vec_exp_sub_sum(sg, n, mx);
#else
    const float sum = vec_exp_sub_sum(sg, n, mx);  // sets the padding to 0
#endif
    inv[g] = sum > 0 ? 1.0f / sum : 0.0f;
  }

  // Pass 2: weighted sums of the V rows.
#ifdef MOPT_CPU_AVX2
  if (D % 8 == 0) {
    for (int g0 = 0; g0 < G; g0 += kGroup) {
      const int ng = std::min(kGroup, G - g0);
      const float* e[kGroup];
      float* o[kGroup];
      for (int g = 0; g < ng; ++g) {
        e[g] = sc.score.data() + static_cast<size_t>(g0 + g) * n8;
        o[g] = out + static_cast<int64_t>(g0 + g) * D;
      }
      for (int d0 = 0; d0 < D; d0 += 8) {
        if (ng == 2) apply_v8<2, T>(e, v_base, off, n, d0, inv + g0, o);
        else apply_v8<1, T>(e, v_base, off, n, d0, inv + g0, o);
      }
    }
    return;
  }
#endif
  for (int g = 0; g < G; ++g) {
    const float* eg = sc.score.data() + static_cast<size_t>(g) * n8;
    float* og = out + static_cast<int64_t>(g) * D;
    for (int d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int i = 0; i < n; ++i) acc += eg[i] * load1(v_base + off[i] + d);
      og[d] = acc * inv[g];
    }
  }
}
static_assert(kGroup == 2, "attend_head dispatches apply_v8 for groups of 1 or 2 heads");

// Row offsets (kv head 0, in elements) of token t's attention window [start, p] into sc.off[0, n8), the padding
// repeating the last row (its scores are discarded), and the sequence's block table and start into sc; returns
// the window length n.
int window_offsets(const PagedAttnArgs& a, int t, Scratch& sc) {
  const int s = seq_of_token(a, t);
  MOPT_CHECK(s >= 0 && s < a.n_seqs && t < a.query_start[s + 1], "paged_attention: token %d has no sequence", t);
  const int p = a.positions[t];
  MOPT_CHECK(p >= 0 && p < a.seq_lens[s], "paged_attention: token %d position %d outside context %d", t, p,
             a.seq_lens[s]);
  const int start = a.sliding_window > 0 ? std::max(0, p - a.sliding_window + 1) : 0;
  const int n = p + 1 - start;                 // window length
  const int n8 = (n + 7) & ~7;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
  sc.table = table;
  sc.start = start;
  const int64_t row_stride = static_cast<int64_t>(a.n_head_kv) * a.head_dim;  // elements between consecutive slots
  if (sc.off.size() < static_cast<size_t>(n8)) sc.off.resize(static_cast<size_t>(n8));
  int64_t* off = sc.off.data();
  for (int j = start; j <= p;) {
    const int bi = j / a.block_size;
    MOPT_CHECK(bi < a.max_blocks_per_seq, "paged_attention: position %d beyond the block table", j);
    const int blk = table[bi];
    MOPT_CHECK(blk >= 0, "paged_attention: seq %d position %d has no cache block", s, j);
    const int j1 = std::min(p + 1, (bi + 1) * a.block_size);
    int64_t o = (static_cast<int64_t>(blk) * a.block_size + (j - bi * a.block_size)) * row_stride;
    for (; j < j1; ++j, o += row_stride) off[j - start] = o;
  }
  for (int i = n; i < n8; ++i) off[i] = off[n - 1];
  return n;
}

// Query heads of kv heads [h0, h1) of token t. The window's row offsets are computed once for all of them.
void attend(const PagedAttnArgs& a, int t, int h0, int h1, Scratch& sc) {
  const int n = window_offsets(a, t, sc);
  const size_t n_scores = static_cast<size_t>(a.n_head / a.n_head_kv) * static_cast<size_t>((n + 7) & ~7);
  if (sc.score.size() < n_scores) sc.score.resize(n_scores);
  const bool f16 = a.kv_dtype == DType::F16;
  const int64_t row_bytes = static_cast<int64_t>(a.head_dim) * (f16 ? 2 : 4);
  for (int hkv = h0; hkv < h1; ++hkv) {
    // Heads whose rows start inside a cache line an earlier head of this item already fetched skip prefetching.
    constexpr int64_t kLine = 64;
    const bool prefetch = hkv == h0 || (hkv * row_bytes) % kLine == 0;
    if (f16) attend_head<uint16_t>(a, t, hkv, n, prefetch, sc);
    else attend_head<float>(a, t, hkv, n, prefetch, sc);
  }
}

}  // namespace

void paged_attention(const PagedAttnArgs& a, ThreadPool* pool) {
  MOPT_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "paged_attention: heads %d / kv %d",
             a.n_head, a.n_head_kv);
  MOPT_CHECK(a.head_dim > 0 && a.block_size > 0 && a.n_seqs >= 0, "paged_attention: bad dims");
  MOPT_CHECK(a.kv_dtype == DType::F32 || a.kv_dtype == DType::F16, "paged_attention: KV cache dtype %s unsupported",
             dtype_name(a.kv_dtype));
  if (a.n_seqs == 0) return;
  const int n_tokens = a.query_start[a.n_seqs];
  if (n_tokens <= 0) return;
  const int n_threads = pool ? pool->size() : 1;
  static thread_local std::vector<Scratch> scratch;  // per pool thread id, owned by the calling thread
  scratch.resize(static_cast<size_t>(std::max<int>(n_threads, static_cast<int>(scratch.size()))));
  Scratch* scr = scratch.data();
  // Items: whole tokens when there are enough to share out, else (token, kv head) pairs (e.g. one decode token).
  const int heads_per_item = n_tokens >= 2 * n_threads ? a.n_head_kv : 1;
  const int items_per_token = a.n_head_kv / heads_per_item;

  parallel_items(pool, static_cast<int64_t>(n_tokens) * items_per_token, [&](int64_t item, int tid) {
    const int h0 = static_cast<int>(item % items_per_token) * heads_per_item;
    attend(a, static_cast<int>(item / items_per_token), h0, h0 + heads_per_item, scr[tid]);
  });
}

}  // namespace mopt::cpu
