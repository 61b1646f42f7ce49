// CPU: the instruction sets the build needs and the CPU backend's kernels use, RAM, huge pages.
#include "doctor/checks.h"

#include <cstdlib>

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "CPU";  // this file's findings' group, as printed

constexpr uint64_t kLowMemBytes = uint64_t{2} << 30;

void check_features(const HostFacts& h, const BuildInfo& b, std::vector<Finding>& out) {
  const char* t = "CPU instruction sets";
  std::string have, lack_build;
  for (const CpuFeature& f : h.cpu_features)
    if (f.present) join_to(have, f.name, " ");
  for (const std::string& need : b.cpu_features)
    if (!h.has_feature(need)) join_to(lack_build, need, " ");
  const std::string ev = (h.cpu_model.empty() ? std::string("CPU") : h.cpu_model) + ": " +
                         (have.empty() ? std::string("none of the tracked features") : have);
  if (!lack_build.empty()) {
    add(out, "cpu.features", kGroup, t, Verdict::kFail, ev + "; this build was compiled for " + lack_build + " too",
        "This binary stops with 'illegal instruction' on this CPU: rebuild with -DMOPT_PORTABLE=ON (portable "
        "kernels).");
    return;
  }
  // The path the CPU backend selects at start-up from these features (backend/cpu/isa.h), and what lowers it.
  const bool avx512 = h.has_feature("avx512f") && h.has_feature("avx512bw") && h.has_feature("avx512_vnni");
  const char* path = avx512 ? "avx512" : h.has_feature("avx_vnni") ? "avxvnni" : "avx2";
  std::string note = std::string("; CPU kernel path: ") + path;
  if (!avx512) note += " (no AVX-512 F/BW/VNNI: matrix products, attention and packed fp32 products take 256-bit kernels)";
  if (!avx512 && !h.has_feature("avx_vnni")) note += " (no VNNI: int8 dot products take maddubs + madd)";
  if (const char* env = std::getenv("MOPT_CPU_ISA"); env && *env)
    note += std::string("; MOPT_CPU_ISA=") + env + " forces that path instead";
  add(out, "cpu.features", kGroup, t, Verdict::kOk, ev + note);
}

void check_memory(const HostFacts& h, uint64_t model_bytes, std::vector<Finding>& out) {
  const char* t = "RAM";
  if (!h.mem_total) {
    add(out, "cpu.memory", kGroup, t, Verdict::kSkip, "/proc/meminfo not readable");
    return;
  }
  const uint64_t avail = h.mem_available.value_or(0);
  std::string ev = gib(*h.mem_total) + " total, " + gib(avail) + " available";
  if (model_bytes > 0) ev += "; the model's weights take " + gib(model_bytes);
  if (model_bytes > 0 && model_bytes > avail)
    add(out, "cpu.memory", kGroup, t, Verdict::kWarn, ev,
        "The weights do not fit the available RAM: the CPU backend pages them in from disk at every token (very "
        "slow). Free memory, or use a quantized model (mopt quantize) or the GPU.");
  else if (avail < kLowMemBytes)
    add(out, "cpu.memory", kGroup, t, Verdict::kWarn, ev, "Less than 2 GiB available: close other programs.");
  else
    add(out, "cpu.memory", kGroup, t, Verdict::kOk, ev);
}

void check_hugepages(const HostFacts& h, std::vector<Finding>& out) {
  const char* t = "Huge pages";
  std::string ev = "transparent huge pages: " + (h.thp_mode.empty() ? std::string("unknown") : h.thp_mode);
  if (h.hugepages_total)
    ev += strfmt("; %llu reserved huge pages", static_cast<unsigned long long>(*h.hugepages_total));
  if (h.thp_mode == "never")
    add(out, "cpu.hugepages", kGroup, t, Verdict::kWarn, ev,
        "The CPU backend asks for huge pages (madvise) for its KV cache and large buffers; with THP off every 4 KiB "
        "page costs a TLB entry: echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled.");
  else
    add(out, "cpu.hugepages", kGroup, t, h.thp_mode.empty() ? Verdict::kSkip : Verdict::kOk, ev);
}

}  // namespace

std::vector<Finding> check_cpu(const HostFacts& h, const BuildInfo& build, uint64_t model_bytes) {
  std::vector<Finding> out;
  check_features(h, build, out);
  check_memory(h, model_bytes, out);
  check_hugepages(h, out);
  return out;
}

}  // namespace mopt::doctor
