// The interleaved Q4_0 / Q8_0 and K-quant kernels (qgemm.h, qgemm_k.h) on AVX2 + FMA + F16C, the build's baseline:
// maddubs + madd.
#include "backend/cpu/qgemm.h"

#ifdef __AVX2__
#include "backend/cpu/qgemm_k_impl.h"

namespace mopt::cpu::qgemm_avx2 {
const QGemmSet q4_0 = make_set<V256<false>, FmtQ4, 3>(8);
const QGemmSet q8_0 = make_set<V256<false>, FmtQ8, 3>(0);
const QGemmSet q4_k = make_kset<V256<false>, kLayoutQ4K, 2>();
const QGemmSet q5_k = make_kset<V256<false>, kLayoutQ5K, 2>();
const QGemmSet q6_k = make_kset<V256<false>, kLayoutQ6K, 2>();
}  // namespace mopt::cpu::qgemm_avx2
#endif
