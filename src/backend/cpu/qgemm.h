// Quantized weights repacked at load into row-interleaved groups, and the matrix products over them (decode and
// prompt processing alike): y[M, N] = x[M, K] · W^T for Q4_0 and Q8_0 weights.
//
// Layout: the N rows in groups of kQGroup = 16 (the last one zero-padded), each group's K/32 blocks one after the
// other in pairs, a pair (blocks 2u, 2u + 1) being [32 fp16 scales: block 2u's 16 (row j at j), then block 2u+1's]
// then the codes of block 2u, then those of block 2u + 1 (an odd last block fills the first half of its pair), so
// every 64-byte load of codes is aligned. A block's codes as 32-bit lanes, lane j = 4 consecutive codes of row j:
//   Q4_0: 4 chunks p of 64 bytes, byte 64p + 4j + b = row j's byte 4p + b (low nibble: element 4p + b, high nibble:
//         element 16 + 4p + b) -> 256 bytes; with the scales 576 bytes a pair, the same bytes as the 32 source blocks;
//   Q8_0: 8 chunks t of 64 bytes, byte 64t + 4j + b = row j's code 4t + b, stored + 128 (as u8) -> 512 bytes.
// One load then holds 4 codes of each of 16 rows (or 8 rows on 256 bits), multiplied against 4 activation codes
// broadcast to every lane (vpdpbusd, or maddubs + madd): each lane accumulates its own row, so no horizontal sums,
// the 16 scales of a block convert in one instruction, and a weight load serves every token of a tile.
//
// Unsigned codes (Q4_0 c = q + 8, Q8_0 c = q + 128) times signed Q8_0 activations x: the products carry an offset
// sum(x) * off that the activation side removes, with one fp32 per (token, block): o = -d_x * off * sum(x). Per lane
// and block: t = fma(d_x, float(int dot), o); acc = fma(d_w, t, acc). The AVX2 path without VNNI multiplies Q8_0
// through the sign trick (off = 0). Numerics as matmul (kernels.h): exact integer dots, activations rounded to Q8_0.
//
// K-quants (Q4_K, Q5_K, Q6_K) use the same groups of 16 rows, one group-block per 256-element super-block, with
// Q8_K activations (qgemm_k.h: layout and arithmetic).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "backend/cpu/isa.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace mopt::cpu {

inline constexpr int kQGroup = 16;  // rows per interleaved group
// Bytes ahead of the block in hand that the kernels prefetch, a line per 64 bytes they read: the hardware
// prefetchers alone left decode short of the read bandwidth (docs/cpu.md). The hint is T0 (all cache levels): on an
// Intel Xeon host the non-temporal hint held decode to well under half of the read bandwidth, and on an AMD Zen 5
// host the two were alike (docs/cpu_measured.md, thirty-fifth and thirty-sixth sessions).
inline constexpr int64_t kQPrefetch = 4096;

// Q4_0 / Q8_0 group-blocks in pairs (above): block i's 16 scales and codes within its group g.
template <bool kQ4>
struct QPairs {
  static constexpr int64_t kCodes = kQ4 ? 256 : 512, kPair = 64 + 2 * kCodes;
  static const uint8_t* scales(const uint8_t* g, int64_t i) { return g + (i >> 1) * kPair + 32 * (i & 1); }
  static const uint8_t* codes(const uint8_t* g, int64_t i) { return g + (i >> 1) * kPair + 64 + kCodes * (i & 1); }
};

struct PackedQ {
  DType type = DType::F32;  // the source type (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K); F32 while empty
  int64_t N = 0, K = 0;     // outputs (all parts together), inputs
  uint64_t group_bytes = 0; // bytes of one group: ceil(K/64) pairs of blocks (K/256 group-blocks for K-quants)
  std::unique_ptr<uint8_t[], void (*)(void*)> data{nullptr, nullptr};  // [ceil(N/16), blocks, group-block], 64-aligned
  bool empty() const { return N == 0; }
  uint64_t bytes() const { return static_cast<uint64_t>((N + kQGroup - 1) / kQGroup) * group_bytes; }  // of data
};

struct PackQSource {
  const void* w;  // [N, K] rows of the source type
  int64_t N, K;
};

// True where t has interleaved kernels and rows of K elements fit them (K a multiple of t's block).
bool pack_q_supports(DType t, int64_t K);
// Packs several matrices of type t with the same K as one (their outputs concatenated, as pack_f32 does).
PackedQ pack_q(DType t, std::span<const PackQSource> parts);
// y[M, N] = x[M, K] · W^T over the active path's kernels (isa_active()). Results do not depend on M, the thread count
// or the tiling (each output is the same chain of operations); they can differ between paths by fp32 rounding only.
void matmul_q(const PackedQ& w, const float* x, int64_t M, float* y, ThreadPool* pool);
// Whether one-token products read two memory streams per core through the path's pair kernels (QPairFn; the
// default) or one: a process-wide setting that benchmarks flip to compare the two. Results are the same bits.
void set_decode_pairs(bool on);
bool decode_pairs();
// The same on one given path (tests compare paths); false where the path is not supported here.
bool matmul_q_isa(const PackedQ& w, const float* x, int64_t M, float* y, ThreadPool* pool, DotIsa isa);

// ---- kernel interface (qgemm_impl.h, one instantiation per instruction set) ----

// Activations of a tile: Q8_0 codes and, per block, the scale d and the offset term o (see above); for K-quants Q8_K
// codes, per super-block d and the activation sums (qgemm_k.h), o unused.
struct QAct {
  const int8_t* qs;      // [M, K]
  const float* d;        // [M, nb]
  const float* o;        // [M, nb]
  const uint32_t* sums;  // [M, nb, 8] K-quants only
  int64_t K, nb;
};
inline constexpr int kQMaxTokens = 8;  // tokens per kernel call, at most
// y[r * ldy + j] = row j of the group (j < valid) times token m + r, for r < R (entry R-1 of QGemmSet::fn).
using QTileFn = void (*)(const uint8_t* group, const QAct& a, int64_t m, float* y, int64_t ldy, int valid);
// One token x two groups g[0], g[1] in lockstep, block i of each in turn (decode: two memory streams per core, which
// a core reads faster than one; qgemm.cpp, stream_items): y[s][j] = row j of group s (j < valid[s]), bit for bit
// what QTileFn gives for each group alone.
using QPairFn = void (*)(const uint8_t* const* g, const QAct& a, float* const* y, const int* valid);
struct QGemmSet {
  QTileFn fn[kQMaxTokens];  // nullptr above max_tokens
  int max_tokens;           // tokens per call this path's registers hold
  int offset;               // the code offset its dots leave in (8, 128, or 0 for signed Q8_0 dots)
  QPairFn pair = nullptr;   // two groups for one token; nullptr: one group at a time
};
// The set of kernels get(std::integral_constant<int, R>{}) for R = 1..N tokens per call.
template <int N, class Get>
constexpr QGemmSet qgemm_set_of(int offset, Get get) {
  QGemmSet s{};
  [&]<int... Rs>(std::integer_sequence<int, Rs...>) {
    ((s.fn[Rs] = get(std::integral_constant<int, Rs + 1>{})), ...);
  }(std::make_integer_sequence<int, N>{});
  s.max_tokens = N;
  s.offset = offset;
  return s;
}
// The kernels of type t (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) on one path, nullptr where not built or not run by this CPU.
const QGemmSet* qgemm_set(DType t, DotIsa isa);

namespace qgemm_scalar { extern const QGemmSet q4_0, q8_0, q4_k, q5_k, q6_k; }  // qgemm.cpp, qgemm_k.cpp
#ifdef __AVX2__
namespace qgemm_avx2 { extern const QGemmSet q4_0, q8_0, q4_k, q5_k, q6_k; }
namespace qgemm_vnni { extern const QGemmSet q4_0, q8_0, q4_k, q5_k, q6_k; }
namespace qgemm_avx512 { extern const QGemmSet q4_0, q8_0, q4_k, q5_k, q6_k; }
#endif

}  // namespace mopt::cpu
