// The interleaved Q4_0 / Q8_0 kernels (qgemm.h) on AVX2 + FMA + F16C, the build's baseline: maddubs + madd.
#include "backend/cpu/qgemm.h"

#ifdef __AVX2__
#include "backend/cpu/qgemm_impl.h"

namespace mopt::cpu::qgemm_avx2 {
const QGemmSet q4_0 = make_set<V256<false>, FmtQ4>(8, std::make_integer_sequence<int, 3>{});
const QGemmSet q8_0 = make_set<V256<false>, FmtQ8>(0, std::make_integer_sequence<int, 3>{});
}  // namespace mopt::cpu::qgemm_avx2
#endif
