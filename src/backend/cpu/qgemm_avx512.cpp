// The interleaved Q4_0 / Q8_0 and K-quant kernels (qgemm.h, qgemm_k.h) on AVX-512 F/BW/VL/VNNI: one 512-bit register
// holds 4 codes of all 16 rows of a group, vpdpbusd on 512 bits, and 32 registers let a call take 8 tokens (K-quants:
// 4). Compiled for that target
// inside the AVX2 build and taken only where the CPU has it (isa.h).
#include "backend/cpu/qgemm.h"

#ifdef __AVX2__
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#endif

#include "backend/cpu/qgemm_k_impl.h"

namespace mopt::cpu {
namespace {

struct V512 {
  using I = __m512i;
  using F = __m512;
  static constexpr int L = 16;
  static I zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static void pin(I& v) { asm("" : "+v"(v)); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I bcast(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static I lo(I v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  static I hi(I v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
  static I dot4(I acc, I u, I x) { return _mm512_dpbusd_epi32(acc, u, x); }
  static I finish4(I acc) { return acc; }
  static I join4(I a, I b) { return _mm512_add_epi32(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I prep8(I u) { return u; }
  static I dot8(I acc, I u, I x) { return _mm512_dpbusd_epi32(acc, u, x); }
  static F scales(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static constexpr bool kS16 = false;
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I orand(I a, I b, I m) { return _mm512_ternarylogic_epi32(a, b, m, 0xF8); }  // a | (b & m)
  static I set8(char c) { return _mm512_set1_epi8(c); }
  template <int S>
  static I shr16(I v) { return _mm512_srli_epi16(v, S); }
  static I pairs(const uint8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  template <int E>
  static I scale(I p) { return E == 0 ? _mm512_srai_epi32(_mm512_slli_epi32(p, 16), 16) : _mm512_srai_epi32(p, 16); }
  static I fold(I isum, I sub, I sc) { return _mm512_add_epi32(isum, _mm512_mullo_epi32(sub, sc)); }
  static I pdot(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  template <int S>
  static I shl32(I v) { return _mm512_slli_epi32(v, S); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* y, F v, int n) {
    _mm512_mask_storeu_ps(y, n >= L ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u), v);
  }
};

}  // namespace

namespace qgemm_avx512 {
const QGemmSet q4_0 = make_set<V512, FmtQ4, 8>(8);
const QGemmSet q8_0 = make_set<V512, FmtQ8, 8>(128);
const QGemmSet q4_k = make_kset<V512, kLayoutQ4K, 4>();
const QGemmSet q5_k = make_kset<V512, kLayoutQ5K, 4>();
const QGemmSet q6_k = make_kset<V512, kLayoutQ6K, 4>();
}  // namespace qgemm_avx512

}  // namespace mopt::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma clang attribute pop
#endif
#endif  // __AVX2__
