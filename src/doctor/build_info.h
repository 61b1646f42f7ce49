// What this mopt binary was built with, for the checks that compare the machine against the build: the CUDA
// runtime version and the GPU architectures compiled into the CUDA backend (compile definitions set by
// CMakeLists.txt), and the x86 instruction sets the compiler was allowed to use.
#pragma once

#include <string>
#include <vector>

namespace mopt::doctor {

struct BuildInfo {
  int cudart_version = 0;                 // CUDART_VERSION of the toolkit (12080 = 12.8); 0 = built without CUDA
  std::string cuda_archs;                 // CMake CUDA_ARCHITECTURES of the backend, e.g. "90a-real;80-virtual"
  std::vector<std::string> cpu_features;  // "avx2", "fma", "f16c", "bmi2" (from the compiler's predefined macros)

  static BuildInfo current();
};

// How the CUDA backend's code reaches a GPU of compute capability major.minor.
enum class ArchSupport { kNative, kPtxJit, kNone };
// Parses CMake CUDA_ARCHITECTURES entries: "90a-real" (machine code for exactly 9.0), "80-real" (machine code for
// 8.x, x >= 0), "80-virtual" (PTX the driver compiles for 8.0 and newer), "86" (both). `via` names the entry used.
ArchSupport arch_support(const std::string& archs, int major, int minor, std::string* via = nullptr);

}  // namespace mopt::doctor
