// The interleaved Q4_0 / Q8_0 and K-quant kernels (qgemm.h, qgemm_k.h) on AVX-VNNI: vpdpbusd on 256 bits, compiled
// for that target inside the AVX2 build and taken only where the CPU has it (isa.h).
#include "backend/cpu/qgemm.h"

#ifdef __AVX2__
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avxvnni")
#elif defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni"))), apply_to = function)
#endif

#include "backend/cpu/qgemm_k_impl.h"

namespace mopt::cpu::qgemm_vnni {
const QGemmSet q4_0 = make_set<V256<true>, FmtQ4, 3>(8);
const QGemmSet q8_0 = make_set<V256<true>, FmtQ8, 3>(128);
const QGemmSet q4_k = make_kset<V256<true>, kLayoutQ4K, 2>();
const QGemmSet q5_k = make_kset<V256<true>, kLayoutQ5K, 2>();
const QGemmSet q6_k = make_kset<V256<true>, kLayoutQ6K, 2>();
}  // namespace mopt::cpu::qgemm_vnni

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#elif defined(__clang__)
#pragma clang attribute pop
#endif
#endif  // __AVX2__
