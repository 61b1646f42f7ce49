// Packing into the interleaved layout of qgemm.h, the activation side (Q8_0 codes, scales and offset terms), the
// portable kernels (the same arithmetic lane by lane), and the driver that splits the product over threads (K-quant
// packing, activations and portable kernels: qgemm_k.cpp).
#include "backend/cpu/qgemm.h"

#include "backend/cpu/qgemm_k.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "backend/cpu/quant.h"
#include "core/claim_ranges.h"
#include "core/formats/formats.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

constexpr int64_t kTileTokens = 64;  // tokens per work item: a group's row is reused by all of them from L1/L2
// Groups per work item of a decode-sized call (one token tile), streamed per thread (stream_items; the gain against
// items shared dynamically is in docs/cpu.md).
constexpr int64_t kStreamGroups = 2;

// Bytes of one group of nb blocks.
uint64_t group_bytes(DType t, int64_t nb) {
  if (const QKLayout* L = qk_layout(t)) return static_cast<uint64_t>(nb * L->bytes);
  const int64_t pair = t == DType::Q4_0 ? QPairs<true>::kPair : QPairs<false>::kPair;
  return static_cast<uint64_t>((nb + 1) / 2 * pair);
}
int64_t block_elems(DType t) { return qk_layout(t) ? kQKK : kQK0; }

// ---- portable kernels: the SIMD kernels' arithmetic lane by lane (same integer dots, same fma chain) ----

// Code c (unsigned, offset included) of element e of row j in a block's codes q.
template <bool kQ4>
inline int code(const uint8_t* q, int j, int e) {
  if constexpr (kQ4) {
    const int l = e & 15;  // source byte l: elements l (low nibble) and l + 16 (high nibble)
    const uint8_t byte = q[64 * (l >> 2) + 4 * j + (l & 3)];
    return e < 16 ? byte & 15 : byte >> 4;
  } else {
    return q[64 * (e >> 2) + 4 * j + (e & 3)];
  }
}

template <bool kQ4, int R>
void tile_scalar(const uint8_t* g, const QAct& a, int64_t m, float* y, int64_t ldy, int valid) {
  for (int j = 0; j < valid; ++j)
    for (int r = 0; r < R; ++r) {
      const int8_t* x = a.qs + (m + r) * a.K;
      float acc = 0.0f;
      for (int64_t i = 0; i < a.nb; ++i) {
        uint16_t h;
        std::memcpy(&h, QPairs<kQ4>::scales(g, i) + 2 * j, 2);
        int32_t dot = 0;
        for (int e = 0; e < kQK0; ++e) dot += code<kQ4>(QPairs<kQ4>::codes(g, i), j, e) * x[kQK0 * i + e];
        const float t = std::fma(a.d[(m + r) * a.nb + i], static_cast<float>(dot), a.o[(m + r) * a.nb + i]);
        acc = std::fma(fp16_to_fp32(h), t, acc);
      }
      y[r * ldy + j] = acc;
    }
}


// Activations of one matmul_q call, reused across calls on the same thread.
struct ActScratch {
  std::vector<int8_t> qs;      // [M, K]
  std::vector<float> d, o;     // [M, nb]
  std::vector<uint32_t> sums;  // [M, nb, 8] K-quants
};
ActScratch& act_scratch() {
  static thread_local ActScratch s;
  return s;
}

// Items [0, n) over the pool's threads, each thread walking its own contiguous range front to back, then taking items
// from the back of the others' ranges (a core slowed by other work is helped without breaking the others' streams).
// With pair (the kernels have a two-stream form), a thread's range is two halves walked in lockstep: pair(a, b) takes
// an item of each, and the kernels interleave their blocks, so that the hardware prefetchers follow two memory streams
// per core, which a core reads faster than one (docs/cpu.md); an item left without a partner runs through fn.
// Each thread first calls start(first, k), first[0..k) being the first items of its k ranges (k = 2 with pair, else
// 1), which returns the thread's context ctx (matmul_q: its quantized activations); then fn(ctx, item) and
// pair(ctx, a, b), or nullptr for pair: one stream per thread. Templates, so that a call builds no std::function.
template <class Start, class Fn, class PairFn>
void stream_items(ThreadPool& pool, int64_t n, const Start& start, const Fn& fn, const PairFn* pair) {
  const int nt = pool.size(), per = pair ? 2 : 1, ns = nt * per;  // range k: thread k / per's (half k % per)
  // The owner of a range claims a quarter of what is left of it at a time, a helper one item from its back. A claim
  // is a locked instruction, which keeps the core from running ahead into the next item's loads while the earlier
  // ones drain: a claim per item showed in profiles of decode (docs/cpu.md). Quarters take a few claims per call,
  // down to single items at the end, so a helping thread still waits one item at most.
  ClaimRanges ranges(n, ns);
  pool.parallel_for(nt, [&](int64_t c, int64_t, int) {
    const int own = static_cast<int>(c) * per;
    const int64_t first[2] = {ranges.first(own), pair ? ranges.first(own + 1) : -1};
    const auto ctx = start(first, per);
    for (;;) {
      int64_t na = 0, nb = 0;
      const int64_t a = ranges.front(own, 0, &na), b = pair ? ranges.front(own + 1, 0, &nb) : -1;
      if (a < 0 && b < 0) break;
      const int64_t both = std::min(na, nb);
      for (int64_t j = 0; j < both; ++j) (*pair)(ctx, a + j, b + j);
      for (int64_t j = both; j < na; ++j) fn(ctx, a + j);
      for (int64_t j = both; j < nb; ++j) fn(ctx, b + j);
    }
    // Then the others' ranges from their backs: with pair, one item from the back of each half of a thread, run as
    // a pair (two streams, as the owner reads them).
    for (int k = per; k < ns; k += per)
      for (;;) {
        int64_t m = 0;
        const int64_t a = ranges.back((own + k) % ns, 1, &m), b = pair ? ranges.back((own + k + 1) % ns, 1, &m) : -1;
        if (a < 0 && b < 0) break;
        if (a >= 0 && b >= 0) {
          (*pair)(ctx, a, b);
        } else {
          fn(ctx, a >= 0 ? a : b);
        }
      }
  });
}

}  // namespace

namespace qgemm_scalar {
const QGemmSet q4_0 = qgemm_set_of<4>(8, [](auto r) { return &tile_scalar<true, r>; });
const QGemmSet q8_0 = qgemm_set_of<4>(128, [](auto r) { return &tile_scalar<false, r>; });
}  // namespace qgemm_scalar

namespace {

// Per path, the kernels of Q4_0, Q8_0, Q4_K, Q5_K, Q6_K (in that order).
#define MOPT_QGEMM_SETS(ns) {&ns::q4_0, &ns::q8_0, &ns::q4_k, &ns::q5_k, &ns::q6_k}
constexpr DType kQTypes[] = {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};
#ifdef __AVX2__
const QGemmSet* const kQSets[kNumDotIsa][5] = {MOPT_QGEMM_SETS(qgemm_scalar), MOPT_QGEMM_SETS(qgemm_avx2),
                                               MOPT_QGEMM_SETS(qgemm_vnni), MOPT_QGEMM_SETS(qgemm_avx512)};
#else
const QGemmSet* const kQSets[kNumDotIsa][5] = {MOPT_QGEMM_SETS(qgemm_scalar)};
#endif
#undef MOPT_QGEMM_SETS

}  // namespace

const QGemmSet* qgemm_set(DType t, DotIsa isa) {
  if (!isa_supported(isa)) return nullptr;
  for (int i = 0; i < 5; ++i)
    if (kQTypes[i] == t) return kQSets[static_cast<int>(isa)][i];
  return nullptr;
}

bool pack_q_supports(DType t, int64_t K) {
  if (K <= 0) return false;
  if (qk_layout(t)) return K % kQKK == 0;
  return (t == DType::Q4_0 || t == DType::Q8_0) && K % kQK0 == 0;
}

PackedQ pack_q(DType t, std::span<const PackQSource> parts) {
  MOPT_CHECK(!parts.empty(), "pack_q: no matrices");
  const int64_t K = parts[0].K;
  MOPT_CHECK(pack_q_supports(t, K), "pack_q: %s rows of %lld elements have no interleaved kernels", dtype_name(t),
             static_cast<long long>(K));
  PackedQ out;
  out.type = t;
  out.K = K;
  for (const PackQSource& s : parts) {
    MOPT_CHECK(s.K == K && s.N > 0 && s.w, "pack_q: matrices must share K (got %lld, %lld) and have rows",
               static_cast<long long>(s.K), static_cast<long long>(K));
    out.N += s.N;
  }
  const int64_t nb = K / block_elems(t), groups = (out.N + kQGroup - 1) / kQGroup;
  out.group_bytes = group_bytes(t, nb);
  // 2 MiB-aligned and, where the kernel has transparent huge pages on request, backed by them: decode streams the
  // whole buffer once per token, and with 4 KiB pages every page crossed is a TLB miss the prefetchers stop at.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t used = static_cast<size_t>(groups) * out.group_bytes;
  const size_t align = used >= kHuge ? kHuge : 64, bytes = (used + align - 1) / align * align;
  out.data = {static_cast<uint8_t*>(std::aligned_alloc(align, bytes)), &std::free};
  MOPT_CHECK(out.data != nullptr, "pack_q: cannot allocate %zu bytes", bytes);
#ifdef __linux__
  if (align == kHuge) madvise(out.data.get(), bytes, MADV_HUGEPAGE);  // a hint: 4 KiB pages where refused
#endif
  std::memset(out.data.get(), 0, bytes);
  const bool q4 = t == DType::Q4_0;
  const uint64_t src_row = *row_bytes(t, static_cast<uint64_t>(K));
  int64_t n = 0;  // output row in the concatenation
  for (const PackQSource& s : parts)
    for (int64_t r = 0; r < s.N; ++r, ++n) {
      const uint8_t* src = static_cast<const uint8_t*>(s.w) + static_cast<uint64_t>(r) * src_row;
      const int j = static_cast<int>(n % kQGroup);
      uint8_t* dst = out.data.get() + static_cast<uint64_t>(n / kQGroup) * out.group_bytes;
      if (qk_layout(t)) {
        qk_pack_row(t, src, nb, j, dst);
        continue;
      }
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t* sc = dst + ((q4 ? QPairs<true>::scales(dst, i) : QPairs<false>::scales(dst, i)) - dst);
        if (q4) {
          uint8_t* q = dst + (QPairs<true>::codes(dst, i) - dst);
          const auto& b = reinterpret_cast<const BlockQ4_0*>(src)[i];
          std::memcpy(sc + 2 * j, &b.d, 2);
          for (int p = 0; p < 4; ++p) std::memcpy(q + 64 * p + 4 * j, b.qs + 4 * p, 4);
        } else {
          uint8_t* q = dst + (QPairs<false>::codes(dst, i) - dst);
          const auto& b = reinterpret_cast<const BlockQ8_0*>(src)[i];
          std::memcpy(sc + 2 * j, &b.d, 2);
          for (int e = 0; e < kQK0; ++e)
            q[64 * (e >> 2) + 4 * j + (e & 3)] = static_cast<uint8_t>(static_cast<uint8_t>(b.qs[e]) ^ 0x80u);
        }
      }
    }
  return out;
}

namespace {
std::atomic<bool> g_decode_pairs{true};
}  // namespace

void set_decode_pairs(bool on) { g_decode_pairs.store(on, std::memory_order_relaxed); }
bool decode_pairs() { return g_decode_pairs.load(std::memory_order_relaxed); }

bool matmul_q_isa(const PackedQ& w, const float* x, int64_t M, float* y, ThreadPool* pool, DotIsa isa) {
  MOPT_CHECK(!w.empty() && M >= 0, "matmul_q: empty weights or negative M");
  const QGemmSet* set = qgemm_set(w.type, isa);
  if (!set) return false;
  if (M == 0) return true;
  const bool kq = qk_layout(w.type) != nullptr;
  const int64_t K = w.K, N = w.N, nb = K / block_elems(w.type);

  // Activations: Q8_0 codes per row, the fp32 scale and the offset term o = -d * off * sum(codes) per block (K-quants:
  // Q8_K codes, scales and sums, qgemm_k.h), in a thread's scratch.
  const float off = static_cast<float>(set->offset);
  auto scratch = [&]() -> ActScratch& {  // the calling thread's, sized for this call
    ActScratch& s = act_scratch();
    if (s.qs.size() < static_cast<size_t>(M * K)) s.qs.resize(static_cast<size_t>(M * K));
    if (s.d.size() < static_cast<size_t>(M * nb)) s.d.resize(static_cast<size_t>(M * nb)), s.o.resize(s.d.size());
    if (kq && s.sums.size() < static_cast<size_t>(M * nb * 8)) s.sums.resize(static_cast<size_t>(M * nb * 8));
    return s;
  };
  auto quant_rows = [&](ActScratch& s, int64_t b, int64_t e) {
    static thread_local std::vector<BlockQ8_0> blk;  // one row's Q8_0 blocks (per thread: rows run in parallel)
    if (!kq && blk.size() < static_cast<size_t>(nb)) blk.resize(static_cast<size_t>(nb));
    for (int64_t m = b; m < e; ++m) {
      if (kq) {
        qk_quant_act(w.type, x + m * K, K, s.qs.data() + m * K, s.d.data() + m * nb, s.sums.data() + m * nb * 8);
        continue;
      }
      // The row in one call: per block, the conversion's dispatch and checks cost as much as the block itself.
      quantize_row(DType::Q8_0, x + m * K, blk.data(), K);
      for (int64_t i = 0; i < nb; ++i) {
        const BlockQ8_0& q = blk[static_cast<size_t>(i)];
        std::memcpy(s.qs.data() + m * K + i * kQK0, q.qs, kQK0);
        int32_t sum = 0;
        for (int e = 0; e < kQK0; ++e) sum += q.qs[e];
        const float d = fp16_to_fp32(q.d);
        s.d[static_cast<size_t>(m * nb + i)] = d;
        s.o[static_cast<size_t>(m * nb + i)] = -(d * (off * static_cast<float>(sum)));  // off * sum: exact
      }
    }
  };
  auto act_of = [&](const ActScratch& s) {
    return QAct{s.qs.data(), s.d.data(), s.o.data(), kq ? s.sums.data() : nullptr, K, nb};
  };

  // Work items: a run of groups x a tile of tokens; each group's row is read from memory once per tile. With one
  // tile (decode), runs of kStreamGroups groups streamed per thread (stream_items); else handed out dynamically.
  const int64_t groups = (N + kQGroup - 1) / kQGroup;
  const int64_t nt = pool ? std::max(1, pool->size()) : 1;
  const int64_t tiles = (M + kTileTokens - 1) / kTileTokens;
  const int64_t gchunk = tiles == 1 ? kStreamGroups : std::clamp<int64_t>(groups / (8 * nt), 1, 8);
  const int64_t chunks = (groups + gchunk - 1) / gchunk;
  // Group g's weights and its rows that exist (the last group may be cut short).
  auto group_at = [&](int64_t g) { return w.data.get() + static_cast<uint64_t>(g) * w.group_bytes; };
  auto valid_of = [&](int64_t g) { return static_cast<int>(std::min<int64_t>(kQGroup, N - g * kQGroup)); };
  // Group g against the tokens of tile tm.
  auto run_group = [&](const QAct& act, int64_t g, int64_t tm = 0) {
    const int64_t m1 = std::min(M, (tm + 1) * kTileTokens);
    for (int64_t m = tm * kTileTokens; m < m1;) {
      const int r = static_cast<int>(std::min<int64_t>(set->max_tokens, m1 - m));
      set->fn[r - 1](group_at(g), act, m, y + m * N + g * kQGroup, N, valid_of(g));
      m += r;
    }
  };
  auto run_item = [&](const QAct& act, int64_t item) {
    const int64_t c = item % chunks, tm = item / chunks;
    const int64_t g1 = std::min(groups, (c + 1) * gchunk);
    for (int64_t g = c * gchunk; g < g1; ++g) run_group(act, g, tm);
  };
  // One token: two runs of groups at a time through the path's two-stream kernel, where it has one.
  auto run_pair = [&](const QAct& act, int64_t ia, int64_t ib) {
    const int64_t a0 = ia * gchunk, a1 = std::min(groups, a0 + gchunk);
    const int64_t b0 = ib * gchunk, b1 = std::min(groups, b0 + gchunk);
    int64_t k = 0;
    for (; a0 + k < a1 && b0 + k < b1; ++k) {
      const int64_t ga = a0 + k, gb = b0 + k;
      const uint8_t* const g[2] = {group_at(ga), group_at(gb)};
      float* const yg[2] = {y + ga * kQGroup, y + gb * kQGroup};
      const int valid[2] = {valid_of(ga), valid_of(gb)};
      set->pair(g, act, yg, valid);
    }
    for (int64_t g = a0 + k; g < a1; ++g) run_group(act, g);
    for (int64_t g = b0 + k; g < b1; ++g) run_group(act, g);
  };
  const bool pairs = M == 1 && set->pair && decode_pairs();
  const bool stream = tiles == 1 && nt > 1;
  // Few tokens, streamed: every thread quantizes them itself, into its own scratch, rather than waiting for the
  // caller to do it before the threads start (docs/cpu.md). More: the rows are split over the threads first.
  const bool own_quant = stream && M < 4;
  QAct shared{};
  if (!own_quant) {
    ActScratch& s = scratch();
    if (pool && M >= 4) {
      pool->parallel_for(M, [&](int64_t b, int64_t e, int) { quant_rows(s, b, e); });
    } else {
      quant_rows(s, 0, M);
    }
    shared = act_of(s);
  }
  if (stream) {
    // Each thread first sends for the first kQPrefetch bytes of each of its streams (the lines that the kernels'
    // own prefetches start past), so that memory works while it quantizes and the first blocks wait less.
    const uint8_t* const end = group_at(groups);
    auto start = [&](const int64_t* first, int k) {
      for (int r = 0; r < k; ++r) {
        if (first[r] < 0) continue;
        const uint8_t* p = group_at(first[r] * gchunk);
        for (const uint8_t* e = std::min(end, p + kQPrefetch); p < e; p += 64) __builtin_prefetch(p, 0, 3);
      }
      if (!own_quant) return shared;
      ActScratch& s = scratch();
      quant_rows(s, 0, M);
      return act_of(s);
    };
    stream_items(*pool, chunks, start, run_item, pairs ? &run_pair : nullptr);
  } else if (pairs) {  // one thread: the two halves in lockstep
    const int64_t half = chunks / 2;
    for (int64_t c = 0; c < half; ++c) run_pair(shared, c, half + c);
    if (chunks % 2) run_item(shared, chunks - 1);
  } else {
    parallel_items(pool, chunks * tiles, [&](int64_t item, int) { run_item(shared, item); });
  }
  return true;
}

void matmul_q(const PackedQ& w, const float* x, int64_t M, float* y, ThreadPool* pool) {
  for (int i = static_cast<int>(isa_active()); i >= 0; --i)
    if (matmul_q_isa(w, x, M, y, pool, static_cast<DotIsa>(i))) return;
  MOPT_CHECK(false, "matmul_q: no kernels for %s", dtype_name(w.type));
}

}  // namespace mopt::cpu
