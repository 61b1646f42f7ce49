#include "doctor/build_info.h"

#include <cstdlib>
#include <sstream>

#ifndef MOPT_BUILD_CUDART_VERSION
#define MOPT_BUILD_CUDART_VERSION 0
#endif
#ifndef MOPT_BUILD_CUDA_ARCHS
#define MOPT_BUILD_CUDA_ARCHS ""
#endif

namespace mopt::doctor {

BuildInfo BuildInfo::current() {
  BuildInfo b;
  b.cudart_version = MOPT_BUILD_CUDART_VERSION;
  b.cuda_archs = MOPT_BUILD_CUDA_ARCHS;  // "90a-real,80-virtual": CMake's list with commas
  for (char& c : b.cuda_archs)
    if (c == ',') c = ';';
  // The instruction sets the compiler was told it may use: only the preprocessor knows, hence one #ifdef a name.
  b.cpu_features = {
#ifdef __AVX2__
      "avx2",
#endif
#ifdef __FMA__
      "fma",
#endif
#ifdef __F16C__
      "f16c",
#endif
#ifdef __BMI2__
      "bmi2",
#endif
#ifdef __AVX512F__
      "avx512f",
#endif
  };
  return b;
}

ArchSupport arch_support(const std::string& archs, int major, int minor, std::string* via) {
  const int cc = major * 10 + minor;
  ArchSupport best = ArchSupport::kNone;
  std::stringstream ss(archs);
  for (std::string e; std::getline(ss, e, ';');) {
    if (e.empty()) continue;
    const bool real_only = e.size() > 5 && e.compare(e.size() - 5, 5, "-real") == 0;
    const bool virt_only = e.size() > 8 && e.compare(e.size() - 8, 8, "-virtual") == 0;
    const std::string code = e.substr(0, e.find('-'));
    const bool specific = !code.empty() && (code.back() == 'a' || code.back() == 'f');  // sm_90a: exactly 9.0
    const int arch = std::atoi(code.c_str());
    if (arch <= 0) continue;
    if (!virt_only) {
      // Machine code runs on the same major version at an equal or later minor; "a" code only on its own.
      const bool runs = specific ? arch == cc : (arch / 10 == major && arch <= cc);
      if (runs) {
        if (via) *via = e;
        return ArchSupport::kNative;
      }
    }
    if (!real_only && (specific ? arch == cc : arch <= cc) && best == ArchSupport::kNone) {
      best = ArchSupport::kPtxJit;
      if (via) *via = e;
    }
  }
  return best;
}

}  // namespace mopt::doctor
