// Instruction-set path selection (isa.h).
#include "backend/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mopt::cpu {

namespace {

#if defined(__AVX2__) && (defined(__GNUC__) || defined(__clang__))
// AVX-VNNI (the VEX-encoded dot products): CPUID leaf 7, sub-leaf 1, EAX bit 4. Read directly: clang 14's
// __builtin_cpu_supports does not know "avxvnni". The YMM state it needs is the AVX2 baseline's.
bool cpu_has_avxvnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 4) & 1u;
}
#endif

bool cpu_runs(DotIsa isa) {
  switch (isa) {
    case DotIsa::kScalar:
      return true;
#if defined(__AVX2__) && (defined(__GNUC__) || defined(__clang__))
    case DotIsa::kAvx2:
      return true;  // the build's baseline: a CPU without it cannot run this binary at all
    case DotIsa::kAvxVnni:
      return cpu_has_avxvnni();
    case DotIsa::kAvx512:  // GCC and clang check the OS saves the ZMM state (XCR0) before reporting these
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
    case DotIsa::kAvx2:
    case DotIsa::kAvxVnni:
    case DotIsa::kAvx512:
      return false;
#endif
  }
  return false;
}

std::string g_source = "cpuid";

DotIsa initial_isa() {
  const DotIsa best = isa_best();
  const char* env = std::getenv("MOPT_CPU_ISA");
  if (!env || !*env) return best;
  const auto want = isa_from_name(env);
  if (!want) {
    std::fprintf(stderr, "error: MOPT_CPU_ISA=%s is not a CPU path; use one of scalar, avx2, avxvnni, avx512 "
                 "(or leave it unset for the best this CPU runs, %s)\n", env, isa_name(best));
    std::exit(2);
  }
  if (!isa_supported(*want)) {
    std::fprintf(stderr, "error: MOPT_CPU_ISA=%s: this CPU (or build) does not run the %s path; the best it runs is "
                 "%s\n", env, isa_name(*want), isa_name(best));
    std::exit(2);
  }
  g_source = std::string("MOPT_CPU_ISA=") + env;
  return *want;
}

std::atomic<int>& active() {
  static std::atomic<int> a{static_cast<int>(initial_isa())};
  return a;
}

}  // namespace

const char* isa_name(DotIsa isa) {
  switch (isa) {
    case DotIsa::kScalar: return "scalar";
    case DotIsa::kAvx2: return "avx2";
    case DotIsa::kAvxVnni: return "avxvnni";
    case DotIsa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<DotIsa> isa_from_name(std::string_view name) {
  for (DotIsa i : kAllIsas)
    if (name == isa_name(i)) return i;
  return std::nullopt;
}

bool isa_supported(DotIsa isa) {
  static const bool has[kNumDotIsa] = {cpu_runs(DotIsa::kScalar), cpu_runs(DotIsa::kAvx2),
                                       cpu_runs(DotIsa::kAvxVnni), cpu_runs(DotIsa::kAvx512)};
  return has[static_cast<int>(isa)];
}

DotIsa isa_best() {
  DotIsa best = DotIsa::kScalar;
  for (DotIsa i : kAllIsas)
    if (isa_supported(i)) best = i;
  return best;
}

DotIsa isa_active() { return static_cast<DotIsa>(active().load(std::memory_order_relaxed)); }

const char* isa_source() {
  (void)active();
  return g_source.c_str();
}

bool set_isa(DotIsa isa) {
  if (!isa_supported(isa)) return false;
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace mopt::cpu
