// K-quant matrices (Q4_K, Q5_K, Q6_K) in the interleaved groups of qgemm.h: the layout of one group-block (16 rows x
// one 256-element super-block), the packing, and the activation side.
//
// Every code plane is row-interleaved as the Q4_0 one: a 64-byte load holds 4 bytes of each of the 16 rows, byte
// 4j + b of row j (a 256-bit path takes half h = rows 8h..8h+7 at bytes 32h..32h+31). Codes q (unsigned: Q4_K 4 bits,
// Q5_K 5, Q6_K 6) are split into a nibble plane and a high plane:
//   nib  32 loads: load L, byte 4j + b: low nibble = q[8L + b] & 15, high nibble = q[8L + 4 + b] & 15;
//   hi   one load per sub-block s (Q5_K: 1 bit per code, 8 loads; Q6_K: 2 bits, 16 loads): byte 4j + b holds, for
//        n < sub / 8, q[sub*s + 8n + b] >> 4 at bit 2Bn and q[sub*s + 8n + 4 + b] >> 4 at bit 2Bn + B (B bits);
//   sc   the sub-block scales as int8 pairs: byte 32k + 2j + e = scale of sub-block 2k + e (Q4_K/Q5_K 6-bit, Q6_K s8);
//   mn   Q4_K/Q5_K: the 6-bit mins, the same pair layout (4 pairs);
//   d    16 fp16 (row j at 2j); dmin (Q4_K/Q5_K) the same.
// A pair register (sign-extended to s16: lane j = (v[2k], v[2k+1]) of row j) gives a sub-block's scale per lane with
// one shift or shuffle, and the min term of 2 sub-blocks per multiply-add against 2 activation sums broadcast.
// Per row and super-block, with x the Q8_K activations (d_x, codes, sums xs per sub-block):
//   isum = sum_s sc_s * dot(q_s, x_s)        (exact s32: dpbusd per sub-block times sc, or s16 maddubs then madd)
//   imin = sum_s mn_s * xs_s                 (Q6_K: sc_s * xs_s, its codes' offset 32)
//   Q4_K/Q5_K: acc = fma(d, d_x * isum, acc); acc = fma(dmin, -d_x * imin, acc)
//   Q6_K:      acc = fma(d, d_x * (isum - 32 * imin), acc)
// The integer parts are exact, so every path (and the portable kernel) gives the same bits.
// Bytes per group-block: Q4_K 2368 (the file's 2304 + the scales unpacked to bytes), Q5_K 2880 (2816), Q6_K 3360
// (the same as the file's).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mopt::cpu {

struct QKLayout {
  int sub;         // elements per sub-block: 32 (Q4_K, Q5_K), 16 (Q6_K)
  int hbits;       // bits per code in the high plane: 0, 1, 2
  int s16_loads;   // nibble loads whose maddubs sums fit s16 (AVX2 without VNNI folds after this many)
  bool dmin;       // Q4_K/Q5_K: the min term has its own scales (mn, dmin); Q6_K: offset 32 through sc and d
  int64_t hi, nib, sc, mn, d, dm, bytes;  // plane offsets in a group-block, and its size
  constexpr int subs() const { return 256 / sub; }
  constexpr int min_pairs() const { return dmin ? 4 : subs() / 2; }
  constexpr int64_t min_plane() const { return dmin ? mn : sc; }
};
inline constexpr QKLayout kLayoutQ4K{32, 0, 4, true, 0, 0, 2048, 2176, 2304, 2336, 2368};
inline constexpr QKLayout kLayoutQ5K{32, 1, 2, true, 0, 512, 2560, 2688, 2816, 2848, 2880};
inline constexpr QKLayout kLayoutQ6K{16, 2, 1, false, 0, 1024, 3072, 3072, 3328, 3328, 3360};

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
