// The CPU backend's instruction-set paths, chosen at start-up from cpuid (never at build time: the build's baseline is
// AVX2 + FMA + F16C, and the higher paths are compiled for their targets inside it and taken only where the CPU has
// them). MOPT_CPU_ISA (scalar, avx2, avxvnni, avx512) lowers the path, so tests and benchmarks compare paths on one
// machine; a path above what the CPU has is refused with a message, never silently run.
#pragma once

#include <optional>
#include <string_view>

namespace mopt::cpu {

// Ordered: each path may use every path below it. kAvxVnni: AVX2 plus vpdpbusd on 256 bits. kAvx512: AVX-512
// F/BW/VL/VNNI (BF16 reported by `mopt doctor`, not needed by any kernel).
enum class DotIsa { kScalar, kAvx2, kAvxVnni, kAvx512 };
inline constexpr int kNumDotIsa = 4;
inline constexpr DotIsa kAllIsas[] = {DotIsa::kScalar, DotIsa::kAvx2, DotIsa::kAvxVnni, DotIsa::kAvx512};

const char* isa_name(DotIsa isa);  // "scalar", "avx2", "avxvnni", "avx512"
std::optional<DotIsa> isa_from_name(std::string_view name);

// Whether this build has the path and this CPU (and OS) runs it.
bool isa_supported(DotIsa isa);
// The best path this CPU runs.
DotIsa isa_best();
// The path the kernels take: isa_best(), lowered by MOPT_CPU_ISA (read once, at the first call; an unknown name or a
// path this CPU lacks stops the process with a message saying what it accepts) or by set_isa().
DotIsa isa_active();
// Where the active path came from, for `mopt doctor` / `mopt inspect`: "cpuid" or "MOPT_CPU_ISA=...".
const char* isa_source();
// Sets the active path (tests and benchmarks that compare paths in one process); returns false, changing nothing,
// where !isa_supported(isa). Not for use while kernels run on other threads.
bool set_isa(DotIsa isa);

// RAII: runs a scope on one path, restoring the previous one after.
class ScopedIsa {
 public:
  explicit ScopedIsa(DotIsa isa) : prev_(isa_active()), ok_(set_isa(isa)) {}
  ~ScopedIsa() { set_isa(prev_); }
  bool ok() const { return ok_; }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  DotIsa prev_;
  bool ok_;
};

}  // namespace mopt::cpu
