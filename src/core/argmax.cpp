#include "core/argmax.h"

#include <climits>
#include <cmath>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace mopt {

int32_t argmax_first(const float* x, int n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  float best = x[0];
  int32_t arg = 0;
  int i = 0;
#ifdef __AVX2__
  // Two sets of 8 lanes, each keeping its lane's first maximum (strictly greater replaces; a NaN compares false)
  // and where it was: the dependent compare + blend chain is split in two. A plain scan costs ~0.4 us per
  // 512-entry row, a visible part of a 64-sequence stories260K step.
  if (n >= 16) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf;
    __m256i at0 = _mm256_set1_epi32(INT_MAX), at1 = at0;
    __m256i cur = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i eight = _mm256_set1_epi32(8), sixteen = _mm256_set1_epi32(16);
    for (; i + 16 <= n; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
      const __m256 g0 = _mm256_cmp_ps(v0, m0, _CMP_GT_OQ), g1 = _mm256_cmp_ps(v1, m1, _CMP_GT_OQ);
      m0 = _mm256_blendv_ps(m0, v0, g0);
      m1 = _mm256_blendv_ps(m1, v1, g1);
      at0 = _mm256_blendv_epi8(at0, cur, _mm256_castps_si256(g0));
      at1 = _mm256_blendv_epi8(at1, _mm256_add_epi32(cur, eight), _mm256_castps_si256(g1));
      cur = _mm256_add_epi32(cur, sixteen);
    }
    alignas(32) float mv[16];
    alignas(32) int32_t av[16];
    _mm256_store_ps(mv, m0);
    _mm256_store_ps(mv + 8, m1);
    _mm256_store_si256(reinterpret_cast<__m256i*>(av), at0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(av + 8), at1);
    for (int l = 0; l < 16; ++l)  // lanes that never took a value hold (-inf, INT_MAX): never preferred
      if (mv[l] > best || (mv[l] == best && av[l] < arg)) best = mv[l], arg = av[l];
  }
#endif
  for (; i < n; ++i)  // the tail's indices are above every lane's: only a strictly larger value wins
    if (x[i] > best) best = x[i], arg = i;
  return arg;
}

}  // namespace mopt
