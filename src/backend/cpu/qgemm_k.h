// K-quant matrices (Q4_K, Q5_K, Q6_K) in the interleaved groups of qgemm.h: the layout of one group-block (16 rows x
// one 256-element super-block), the packing, and the activation side.
//
// A group-block is read front to back, one stream: a header, then one chunk per sub-block s:
//   header: sc  the sub-block scales as int8 pairs: byte 32k + 2j + e = scale of sub-block 2k + e of row j (Q4_K/Q5_K
//               6-bit, Q6_K s8);
//           mn  Q4_K/Q5_K: the 6-bit mins in the same pair layout (4 pairs);
//           d   16 fp16 (row j at 2j); dm (Q4_K/Q5_K) dmin, the same;
//   chunk s: Q4_K / Q5_K: [hi] then sub / 8 nibble loads; Q6_K: three 6-bit loads. Every 64-byte load is
//   row-interleaved as the Q4_0 ones: 4 bytes of each of the 16 rows, byte 4j + b of row j (a 256-bit path takes
//   half h = rows 8h..8h+7, bytes 32h..32h+31). Codes q (unsigned: Q4_K 4 bits, Q5_K 5, Q6_K 6) of sub-block s:
//     Q4_K / Q5_K, element e = sub*s + 8n + b:
//       nibble load n: low nibble = q[e] & 15, high nibble = q[e + 4] & 15;
//       hi (Q5_K: B = 1 bit per code; Q4_K: none): for each n, q[e] >> 4 at bit 2Bn, q[e + 4] >> 4 at bit 2Bn + B.
//     Q6_K, element e = 16s + 4t + b: load t (< 3): bits 0-5 = q[e], bits 6-7 = bits 2t, 2t + 1 of q[16s + 12 + b].
//       So a load and a mask give 4 codes of each row, and the three loads' top bits the 4 others (3 shifts, 3 masks,
//       2 ors: 11 operations for 4 registers of codes, where a nibble plane and a plane of high bits took 17).
//   Either way, code register u of a sub-block (u < sub / 4) holds elements 4u..4u+3 of each row's sub-block.
// A pair register (sign-extended to s16: lane j = (v[2k], v[2k+1]) of row j) gives a sub-block's scale per lane with
// one shift or shuffle, and the min term of 2 sub-blocks per multiply-add against 2 activation sums broadcast.
// Per row and super-block, with x the Q8_K activations (d_x, codes, sums xs per sub-block):
//   isum = sum_s sc_s * dot(q_s, x_s)        (exact s32: dpbusd per sub-block times sc, or s16 maddubs then madd)
//   imin = sum_s mn_s * xs_s                 (Q6_K: sc_s * xs_s, its codes' offset 32)
//   Q4_K/Q5_K: acc = fma(d, d_x * isum, acc); acc = fma(dmin, -d_x * imin, acc)
//   Q6_K:      acc = fma(d, d_x * (isum - 32 * imin), acc)
// The integer parts are exact, so every path (and the portable kernel) gives the same bits.
// Bytes per group-block: Q4_K 2368 (the file's 2304 + the scales unpacked to bytes), Q5_K 2880 (2816), Q6_K 3392
// (the file's 3360 + 32 bytes of padding after the header). Every size and chunk offset is a multiple of 64, so a
// 64-byte load never splits a cache line.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mopt::cpu {

struct QKLayout {
  int sub;         // elements per sub-block: 32 (Q4_K, Q5_K), 16 (Q6_K)
  int hbits;       // bits per code above the low nibble (Q6_K's in its three 6-bit loads)
  int s16_regs;    // code registers whose maddubs sums fit s16 (AVX2 without VNNI folds after this many)
  bool dmin;       // Q4_K/Q5_K: the min term has its own scales (mn, dm); Q6_K: offset 32 through sc and d
  int64_t sc, mn, d, dm, body, bytes;  // header offsets (mn = sc, dm = d for Q6_K), the first chunk, the size
  constexpr int subs() const { return 256 / sub; }
  constexpr int min_pairs() const { return dmin ? 4 : subs() / 2; }
  constexpr bool six() const { return hbits == 2; }  // Q6_K: the 6-bit loads
  constexpr int64_t hi_bytes() const { return hbits == 1 ? 64 : 0; }
  constexpr int64_t chunk() const { return six() ? 192 : hi_bytes() + 64 * (sub / 8); }  // bytes per sub-block
  constexpr int64_t hi(int s) const { return body + chunk() * s; }
  constexpr int64_t nib(int s, int n) const { return body + chunk() * s + hi_bytes() + 64 * n; }
  constexpr int64_t six_load(int s, int t) const { return body + chunk() * s + 64 * t; }
};
inline constexpr QKLayout kLayoutQ4K{32, 0, 8, true, 0, 128, 256, 288, 320, 2368};
inline constexpr QKLayout kLayoutQ5K{32, 1, 4, true, 0, 128, 256, 288, 320, 2880};
inline constexpr QKLayout kLayoutQ6K{16, 2, 2, false, 0, 0, 256, 256, 320, 3392};
static_assert(kLayoutQ4K.hi(8) == kLayoutQ4K.bytes && kLayoutQ5K.hi(8) == kLayoutQ5K.bytes &&
              kLayoutQ6K.hi(16) == kLayoutQ6K.bytes);

// The layout of t, nullptr where t is no K-quant.
const QKLayout* qk_layout(DType t);
// Writes row j (< 16) of a group: the nsb super-blocks of src (a row of t) into the group's nsb group-blocks, which
// start zeroed.
void qk_pack_row(DType t, const void* src, int64_t nsb, int j, uint8_t* group);
// One activation row of K elements for t's kernels: Q8_K codes qs [K], scales d [K/256] and, per super-block, 8 words
// of activation sums as s16 pairs ready to broadcast (Q6_K: the 16-element sums; Q4_K/Q5_K: 4 pairs of 32-element
// sums, then zeros).
void qk_quant_act(DType t, const float* x, int64_t K, int8_t* qs, float* d, uint32_t* sums);

}  // namespace mopt::cpu
