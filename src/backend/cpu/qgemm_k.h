// K-quant matrices (Q4_K, Q5_K, Q6_K) in the interleaved groups of qgemm.h: the layout of one group-block (16 rows x
// one 256-element super-block), the packing, and the activation side.
//
// A group-block is read front to back, one stream: a header, then one chunk per sub-block s:
//   header: sc  the sub-block scales as int8 pairs: byte 32k + 2j + e = scale of sub-block 2k + e of row j (Q4_K/Q5_K
//               6-bit, Q6_K s8);
//           mn  Q4_K/Q5_K: the 6-bit mins in the same pair layout (4 pairs);
//           d   16 fp16 (row j at 2j); dm (Q4_K/Q5_K) dmin, the same;
//   chunk s: the sub-block's codes in 64-byte loads, each row-interleaved as the Q4_0 ones: 4 bytes of each of the
//   16 rows, byte 4j + b of row j (a 256-bit path takes half h = rows 8h..8h+7, bytes 32h..32h+31). Codes q
//   (unsigned, W bits: Q4_K 4, Q5_K 5, Q6_K 6) of sub-block s:
//     Q4_K: nibble load n (< 4), element e = 32s + 8n + b: low nibble q[e], high nibble q[e + 4].
//     Q5_K, Q6_K ("wide"): T = 5 or 3 loads; load t holds element e = sub*s + 4t + b in its low W bits, and in its
//       8 - W top bits the next 8 - W bits of X, the sub-block's remaining codes (elements sub*s + 4T + 4x + b, x <
//       sub/4 - T: 3 for Q5_K, 1 for Q6_K) concatenated W bits each from the lowest bit, load 0's top bits first.
//       So a mask gives T registers of 4 codes per row, and the others take 2-3 shifted fields of the top bits each.
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
  int hbits;       // bits per code above a nibble: 0 (Q4_K: nibble loads), 1, 2 (Q5_K, Q6_K: wide loads)
  int s16_regs;    // code registers whose maddubs sums fit s16 (AVX2 without VNNI folds after this many)
  bool dmin;       // Q4_K/Q5_K: the min term has its own scales (mn, dm); Q6_K: offset 32 through sc and d
  int64_t sc, mn, d, dm, body, bytes;  // header offsets (mn = sc, dm = d for Q6_K), the first chunk, the size
  constexpr int subs() const { return 256 / sub; }
  constexpr int min_pairs() const { return dmin ? 4 : subs() / 2; }
  constexpr int width() const { return 4 + hbits; }         // W, bits per code
  constexpr int loads() const { return sub * width() / 32; }  // 64-byte loads per sub-block
  constexpr int direct() const { return hbits ? loads() : 0; }  // wide: the loads' registers of codes (T)
  constexpr int64_t chunk() const { return 64 * loads(); }    // bytes per sub-block
  constexpr int64_t load(int s, int t) const { return body + chunk() * s + 64 * t; }
};
inline constexpr QKLayout kLayoutQ4K{32, 0, 8, true, 0, 128, 256, 288, 320, 2368};
inline constexpr QKLayout kLayoutQ5K{32, 1, 4, true, 0, 128, 256, 288, 320, 2880};
inline constexpr QKLayout kLayoutQ6K{16, 2, 2, false, 0, 0, 256, 256, 320, 3392};
static_assert(kLayoutQ4K.load(8, 0) == kLayoutQ4K.bytes && kLayoutQ5K.load(8, 0) == kLayoutQ5K.bytes &&
              kLayoutQ6K.load(16, 0) == kLayoutQ6K.bytes);

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
