// Paged causal attention on the CPU over a flat varlen batch, for two cache layouts (PagedAttnArgs::k_transposed /
// v_transposed):
//   transposed (the CPU runner's): per block and KV head, 16-position tiles [head_dim][16] (transposed_index() in
//     kernels.h), attended by attention_chunks.inc over 16-position chunks of each token's window [start, p];
//   row-major [n_blocks, block_size, n_head_kv, head_dim] (the layout the CUDA tests compare against).
// Cache elements are fp32 or fp16 (widened exactly to fp32 on load). Each token's output is a fixed expression of
// its own window, whatever the batch around it. The algorithms and the reasons for them: docs/cpu.md, "Attention".
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "backend/cpu/vec16.h"
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
  if (t < a.n_seqs && qs[t] == t && qs[t + 1] == t + 1) return t;  // decode batches: one token per sequence
  const int32_t* it = std::upper_bound(qs, qs + a.n_seqs + 1, t);
  return static_cast<int>(it - qs) - 1;
}

// Checks token t and returns its sequence's block table row and attention window [start, p].
const int32_t* token_window(const PagedAttnArgs& a, int t, int& start, int& p) {
  const int s = seq_of_token(a, t);
  MOPT_CHECK(s >= 0 && s < a.n_seqs && t < a.query_start[s + 1], "paged_attention: token %d has no sequence", t);
  p = a.positions[t];
  MOPT_CHECK(p >= 0 && p < a.seq_lens[s], "paged_attention: token %d position %d outside context %d", t, p,
             a.seq_lens[s]);
  start = a.sliding_window > 0 ? std::max(0, p - a.sliding_window + 1) : 0;
  return a.block_tables + static_cast<int64_t>(s) * a.max_blocks_per_seq;
}

// Cache block holding window position j of a sequence with block table row `table`.
int block_of(const PagedAttnArgs& a, const int32_t* table, int j) {
  const int bi = j / a.block_size;
  MOPT_CHECK(bi < a.max_blocks_per_seq, "paged_attention: position %d beyond the block table", j);
  MOPT_CHECK(table[bi] >= 0, "paged_attention: position %d has no cache block", j);
  return table[bi];
}

struct Scratch {
  // Row-major layout.
  std::vector<int64_t> off;  // [n8] float offset of window position i's row (kv head included) in a cache layer
  std::vector<float> score;  // [G, n8] scores, then exp(score - max)
  // Transposed layout (ChunkArgs).
  std::vector<int64_t> chunk_off;               // [nc]
  std::vector<float> s, acc, mx, sum, gk, gv;  // [G, nc, 16], [G, D, 16], [G], [G, 16], [nc, D, 16] x 2
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
  for (int g = 0; g < G; ++g) {
    float* sg = sc.score.data() + static_cast<size_t>(g) * n8;
    const float* qg = q + static_cast<int64_t>(g) * D;
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
// repeating the last row (its scores are discarded); returns the window length n.
int window_offsets(const PagedAttnArgs& a, int t, Scratch& sc) {
  int start, p;
  const int32_t* table = token_window(a, t, start, p);
  const int n = p + 1 - start;                 // window length
  const int n8 = (n + 7) & ~7;
  const int64_t row_stride = static_cast<int64_t>(a.n_head_kv) * a.head_dim;  // elements between consecutive slots
  if (sc.off.size() < static_cast<size_t>(n8)) sc.off.resize(static_cast<size_t>(n8));
  int64_t* off = sc.off.data();
  for (int j = start; j <= p;) {
    const int bi = j / a.block_size;
    const int blk = block_of(a, table, j);
    const int j1 = std::min(p + 1, (bi + 1) * a.block_size);
    int64_t o = (static_cast<int64_t>(blk) * a.block_size + (j - bi * a.block_size)) * row_stride;
    for (; j < j1; ++j, o += row_stride) off[j - start] = o;
  }
  for (int i = n; i < n8; ++i) off[i] = off[n - 1];
  return n;
}

// Row-major layout: query heads of kv heads [h0, h1) of token t. The window's row offsets are computed once for
// all of them.
void attend_rows(const PagedAttnArgs& a, int t, int h0, int h1, Scratch& sc) {
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

// ---- Transposed K and V: 16-position chunks (attention_chunks.inc) ----

// One (token, kv head) for attend_chunks. T: element type of what k / v point to (the cache's, or float when
// gathered).
template <class T>
struct ChunkArgs {
  const T* k;            // the kv head's part of block 0 (or the gather buffers)
  const T* v;
  const int64_t* off;    // [nc] elements from k / v to chunk i's [D][16] tile
  int nc;                // chunks; chunk i holds positions 16 (c0 + i) + lane
  int lane_lo, lane_hi;  // lanes in the window: [lane_lo, 16) of chunk 0, [0, lane_hi) of chunk nc - 1
  int G, D;
  float scale2;          // the softmax scale times log2(e): scores in base 2 (weights 2^(s - max))
  const float* q;        // [G, D]
  float* out;            // [G, D]
  float* s;              // [G, nc, 16] scores, then exps
  float* acc;            // [G, D, 16] lane-wise V accumulators
  float* mx;             // [G] score maxima
  float* sum;            // [G, 16] lane-wise exp sums
  bool prefetch;         // fetch K and V ahead (in place: blocks scattered over the cache; not when gathered)
};

#ifdef MOPT_CPU_AVX512_PATHS
namespace z16 {
using Vo = vec16::Z16;
#define MOPT_CHUNKS __attribute__((target("avx512f")))
#include "backend/cpu/attention_chunks.inc"
#undef MOPT_CHUNKS
}  // namespace z16
#endif

#ifdef MOPT_CPU_AVX2
namespace y16 {
using Vo = vec16::Y16;
#define MOPT_CHUNKS
#include "backend/cpu/attention_chunks.inc"
#undef MOPT_CHUNKS
}  // namespace y16
#endif

namespace s16 {
using Vo = vec16::S16;
#define MOPT_CHUNKS
#include "backend/cpu/attention_chunks.inc"
#undef MOPT_CHUNKS
}  // namespace s16

// attend_chunks over problems c[0, n) (same D) with the instruction set `isa` allows.
template <class T>
void run_chunks(const ChunkArgs<T>* c, int n, AttnIsa isa) {
  const bool d8 = c[0].D == 8;
#ifdef MOPT_CPU_AVX512_PATHS
  if (isa == AttnIsa::kBest && cpu_has_avx512f())
    return d8 ? z16::attend_chunks<T, 8>(c, n) : z16::attend_chunks<T, 0>(c, n);
#endif
#ifdef MOPT_CPU_AVX2
  if (isa != AttnIsa::kScalar) return d8 ? y16::attend_chunks<T, 8>(c, n) : y16::attend_chunks<T, 0>(c, n);
#endif
  return d8 ? s16::attend_chunks<T, 8>(c, n) : s16::attend_chunks<T, 0>(c, n);
}

// KV heads of one token that attend_chunks takes together (each with its own scratch): up to kMaxHeadsPerPass,
// while their scores fit kPassScoreFloats (longer windows are throughput-bound anyway, and their scores should
// stay in L1 between the passes).
constexpr int kMaxHeadsPerPass = 8;
constexpr int64_t kPassScoreFloats = 4096;

// Chunk i's [D][16] slots of kv head hkv into g[i][D][16] as fp32, lanes outside the window [start, p] zero
// (block sizes that are no multiple of 16: a chunk spans several blocks).
template <class T>
void gather_chunks(const PagedAttnArgs& a, const T* cache, const int32_t* table, int hkv, int c0, int nc, int start,
                   int p, float* g) {
  constexpr int L = vec16::kLanes;
  const int D = a.head_dim, bs = a.block_size;
  const int64_t blk_elems = static_cast<int64_t>(bs) * a.n_head_kv * D;
  for (int i = 0; i < nc; ++i)
    for (int l = 0; l < L; ++l) {
      float* dst = g + static_cast<int64_t>(i) * D * L + l;  // dim d at dst[d * L]
      const int j = (c0 + i) * L + l;
      if (j < start || j > p) {
        for (int d = 0; d < D; ++d) dst[d * L] = 0.0f;
        continue;
      }
      const T* src = cache + block_of(a, table, j) * blk_elems + static_cast<int64_t>(hkv) * D * bs + j % bs;
      for (int d = 0; d < D; ++d) dst[d * L] = load1(src + static_cast<int64_t>(d) * bs);
    }
}

// Transposed layout: query heads of kv heads [h0, h1) of token t.
template <class T>
void attend_transposed(const PagedAttnArgs& a, int t, int h0, int h1, Scratch& sc, AttnIsa isa) {
  constexpr int L = vec16::kLanes;
  int start, p;
  const int32_t* table = token_window(a, t, start, p);
  const int G = a.n_head / a.n_head_kv, D = a.head_dim, bs = a.block_size;
  const int c0 = start / L, nc = p / L - c0 + 1;
  const bool in_place = bs % L == 0;  // every chunk is one [D][16] tile of one block
  auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(sc.chunk_off, static_cast<size_t>(nc));
  const int64_t blk_elems = static_cast<int64_t>(bs) * a.n_head_kv * D;
  if (in_place) {  // chunk i: block table entry bi, slots [o, o + 16) (stepped without divisions)
    int bi = c0 * L / bs, o = c0 * L % bs;
    MOPT_CHECK(p / bs < a.max_blocks_per_seq, "paged_attention: position %d beyond the block table", p);
    for (int i = 0; i < nc; ++i) {
      MOPT_CHECK(table[bi] >= 0, "paged_attention: position %d has no cache block", bi * bs);
      sc.chunk_off[static_cast<size_t>(i)] = table[bi] * blk_elems + static_cast<int64_t>(o) * D;  // tile o / 16
      if ((o += L) == bs) o = 0, ++bi;
    }
  } else {
    for (int i = 0; i < nc; ++i) sc.chunk_off[static_cast<size_t>(i)] = static_cast<int64_t>(i) * D * L;
    grow(sc.gk, static_cast<size_t>(nc) * D * L);
    grow(sc.gv, static_cast<size_t>(nc) * D * L);
  }
  const int64_t head_elems = static_cast<int64_t>(D) * bs;  // one kv head's part of a block
  const int lane_lo = start - c0 * L, lane_hi = p % L + 1;
  const float scale2 = a.scale * std::numbers::log2e_v<float>;
  // Problem j of a pass uses scratch slot j: scores [G, nc, 16], accumulators [G, D, 16], maxima [G], sums [G, 16].
  const int64_t s_n = static_cast<int64_t>(G) * nc * L, acc_n = static_cast<int64_t>(G) * D * L;
  const int per_pass = !in_place ? 1
                       : static_cast<int>(std::clamp<int64_t>(kPassScoreFloats / s_n, 1,
                                                              std::min(kMaxHeadsPerPass, h1 - h0)));
  grow(sc.s, static_cast<size_t>(per_pass * s_n));
  grow(sc.acc, static_cast<size_t>(per_pass * acc_n));
  grow(sc.mx, static_cast<size_t>(per_pass * G));
  grow(sc.sum, static_cast<size_t>(per_pass * G * L));
  for (int hp = h0; hp < h1; hp += per_pass) {
    const int n = std::min(per_pass, h1 - hp);
    if (in_place) {
      ChunkArgs<T> cs[kMaxHeadsPerPass];
      for (int j = 0; j < n; ++j) {
        const int hkv = hp + j;
        const int64_t qo = (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hkv) * G) * D;
        cs[j] = ChunkArgs<T>{static_cast<const T*>(a.k_cache) + hkv * head_elems,
                             static_cast<const T*>(a.v_cache) + hkv * head_elems,
                             sc.chunk_off.data(), nc, lane_lo, lane_hi, G, D, scale2, a.q + qo, a.out + qo,
                             sc.s.data() + j * s_n, sc.acc.data() + j * acc_n, sc.mx.data() + j * G,
                             sc.sum.data() + j * G * L, true};
      }
      run_chunks(cs, n, isa);
    } else {
      const int64_t qo = (static_cast<int64_t>(t) * a.n_head + static_cast<int64_t>(hp) * G) * D;
      gather_chunks(a, static_cast<const T*>(a.k_cache), table, hp, c0, nc, start, p, sc.gk.data());
      gather_chunks(a, static_cast<const T*>(a.v_cache), table, hp, c0, nc, start, p, sc.gv.data());
      const ChunkArgs<float> g{sc.gk.data(), sc.gv.data(), sc.chunk_off.data(), nc, lane_lo, lane_hi, G, D,
                               scale2, a.q + qo, a.out + qo, sc.s.data(), sc.acc.data(), sc.mx.data(),
                               sc.sum.data(), false};
      run_chunks(&g, 1, isa);
    }
  }
}

}  // namespace

void paged_attention(const PagedAttnArgs& a, ThreadPool* pool, AttnIsa isa) {
  MOPT_CHECK(a.n_head > 0 && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "paged_attention: heads %d / kv %d",
             a.n_head, a.n_head_kv);
  MOPT_CHECK(a.head_dim > 0 && a.block_size > 0 && a.n_seqs >= 0, "paged_attention: bad dims");
  MOPT_CHECK(a.kv_dtype == DType::F32 || a.kv_dtype == DType::F16, "paged_attention: KV cache dtype %s unsupported",
             dtype_name(a.kv_dtype));
  MOPT_CHECK(a.k_transposed == a.v_transposed, "paged_attention: K and V must share a layout (transposed or not)");
  MOPT_CHECK(!a.k_transposed || a.head_dim <= kMaxTransposedHeadDim, "paged_attention: head_dim %d above %d",
             a.head_dim, kMaxTransposedHeadDim);
  if (a.n_seqs == 0) return;
  const int n_tokens = a.query_start[a.n_seqs];
  if (n_tokens <= 0) return;
  const int n_threads = pool ? pool->size() : 1;
  static thread_local std::vector<Scratch> scratch;  // per pool thread id, owned by the calling thread
  scratch.resize(static_cast<size_t>(std::max<int>(n_threads, static_cast<int>(scratch.size()))));
  Scratch* scr = scratch.data();
  // Items: whole tokens (whose kv heads the kernel interleaves) when there is one thread or enough tokens to
  // share out, else (token, kv head) pairs (one decode token over several threads).
  const int heads_per_item = n_threads == 1 || n_tokens >= 2 * n_threads ? a.n_head_kv : 1;
  const int items_per_token = a.n_head_kv / heads_per_item;

  parallel_items(pool, static_cast<int64_t>(n_tokens) * items_per_token, [&](int64_t item, int tid) {
    const int h0 = static_cast<int>(item % items_per_token) * heads_per_item;
    const int t = static_cast<int>(item / items_per_token), h1 = h0 + heads_per_item;
    if (!a.k_transposed) attend_rows(a, t, h0, h1, scr[tid]);
    else if (a.kv_dtype == DType::F16) attend_transposed<uint16_t>(a, t, h0, h1, scr[tid], isa);
    else attend_transposed<float>(a, t, h0, h1, scr[tid], isa);
  });
}

}  // namespace mopt::cpu
