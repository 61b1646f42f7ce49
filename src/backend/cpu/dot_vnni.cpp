// AVX-VNNI variants of the Q8_0/Q4_0/Q5_0 kernels: vpdpbusd does maddubs + madd in one instruction (and
// without the s16 saturation). Compiled for the AVX-VNNI target here only; dot_kernels() selects them
// at run time when the CPU reports the feature, so the binary still runs on plain AVX2 machines.
#include "backend/cpu/dot_kernels.h"

#ifdef __AVX2__
#include "backend/cpu/quant.h"
#include "backend/cpu/vec.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avxvnni")
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#endif

#include "backend/cpu/dot_q0_impl.h"

namespace mopt::cpu {
namespace {

struct DotVnni {
  static __m256i dot(__m256i abs_w, __m256i w, __m256i x) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), abs_w, _mm256_sign_epi8(x, w));
  }
};

struct Dot2Vnni {  // as Dot2Maddubs
  static __m256i dot2(__m256i wl, __m256i xl, __m256i wh, __m256i xh) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), wl, xl), wh, xh);
  }
};

}  // namespace

namespace dot_vnni {
const DotSet q8_0 = kSet<DotQ0<BlockQ8_0, load_q8_0, DotVnni>>;
const DotSet q4_0 = kSet<DotQ4_0U<Dot2Vnni>>;
const DotSet q5_0 = kSet<DotQ0<BlockQ5_0, load_q5_0, DotVnni>>;
}  // namespace dot_vnni

}  // namespace mopt::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma clang attribute pop
#endif

#endif  // __AVX2__
