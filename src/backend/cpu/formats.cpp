// The CPU format table (one row per DType, in DType order) and the choice of dot kernels per instruction set.
#include "backend/cpu/formats.h"

#include "backend/cpu/quant.h"

namespace mopt::cpu {

namespace {

#ifdef __AVX2__
#define MOPT_AVX2_SET(set) &dot_avx2::set
#define MOPT_VNNI_SET(set) &dot_vnni::set
#else
#define MOPT_AVX2_SET(set) nullptr
#define MOPT_VNNI_SET(set) nullptr
#endif

// Fields as in CpuFormat: type, dot kernels {scalar, AVX2, AVX-VNNI, AVX-512}, vectorized to_float / from_float,
// activation block scales, repack.
constexpr CpuFormat kFormats[] = {
    {DType::F32, {&dot_scalar::f32, MOPT_AVX2_SET(f32), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::F16, {&dot_scalar::f16, MOPT_AVX2_SET(f16), nullptr, nullptr}, f16_to_float_fast, f16_from_float_fast, nullptr, {}},
    {DType::BF16, {&dot_scalar::bf16, MOPT_AVX2_SET(bf16), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::Q8_0, {&dot_scalar::q8_0, MOPT_AVX2_SET(q8_0), MOPT_VNNI_SET(q8_0), nullptr}, nullptr, q8_0_from_float_fast,
     q8_0_act_scales, {}},
    {DType::Q4_0, {&dot_scalar::q4_0, MOPT_AVX2_SET(q4_0), MOPT_VNNI_SET(q4_0), nullptr}, nullptr, nullptr, nullptr,
     {DType::Q8_0, widen_q4_0_to_q8_0, 2 * kDotRows}},
    {DType::Q4_K, {&dot_scalar::q4_k, MOPT_AVX2_SET(q4_k), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::Q5_K, {&dot_scalar::q5_k, MOPT_AVX2_SET(q5_k), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::Q6_K, {&dot_scalar::q6_k, MOPT_AVX2_SET(q6_k), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::Q8_K, {}, nullptr, q8_k_from_float_fast, nullptr, {}},
    {DType::I8, {}, nullptr, nullptr, nullptr, {}},
    {DType::I32, {}, nullptr, nullptr, nullptr, {}},
    {DType::Q5_0, {&dot_scalar::q5_0, MOPT_AVX2_SET(q5_0), MOPT_VNNI_SET(q5_0), nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::Q5_1, {&dot_scalar::q5_1, MOPT_AVX2_SET(q5_1), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::I64, {}, nullptr, nullptr, nullptr, {}},
    {DType::F8_E4M3, {}, nullptr, nullptr, nullptr, {}},
    {DType::FP8, {&dot_scalar::fp8, MOPT_AVX2_SET(fp8), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::INT8, {&dot_scalar::int8, MOPT_AVX2_SET(int8), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
    {DType::INT4_G128, {&dot_scalar::int4_g128, MOPT_AVX2_SET(int4_g128), nullptr, nullptr}, nullptr, nullptr, nullptr, {}},
};

static_assert(one_row_per_dtype(kFormats), "one row per DType, in DType order");

}  // namespace

const CpuFormat& cpu_format(DType t) { return kFormats[static_cast<int>(t)]; }

const DotFn* dot_kernels_isa(DType t, DotIsa isa) {
  if (!isa_supported(isa)) return nullptr;
  const DotSet* set = cpu_format(t).dot[static_cast<int>(isa)];
  return set ? set->rows : nullptr;
}

const DotFn* dot_kernels(DType t) {
  for (int i = static_cast<int>(isa_active()); i >= 0; --i)  // the active path's kernels, else the best below it
    if (const DotFn* fns = dot_kernels_isa(t, static_cast<DotIsa>(i))) return fns;
  return nullptr;
}

}  // namespace mopt::cpu
