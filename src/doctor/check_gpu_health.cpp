// GPU health, per GPU: memory and who holds it, ECC, retired/remapped memory, persistence mode, PCIe link,
// clocks with throttle reasons, temperature and power, MIG; and Xid errors from the kernel log.
#include <algorithm>

#include "doctor/checks.h"
#include "doctor/nvml_api.h"

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "GPU health";  // this file's findings' group, as printed

// Memory other processes may hold before it is worth a warning (the driver itself reserves a few hundred MiB).
constexpr uint64_t kOthersWarnBytes = uint64_t{1} << 30;
// Free memory below this fraction of the total: the model and a KV cache cannot fit.
constexpr double kFreeFailFraction = 0.05;
// Degrees below the slowdown threshold that count as "close".
constexpr unsigned kTempMarginC = 5;

// Where one check reports: its id ("gpu0.ecc") and title ("GPU 0 ECC") are fixed; each outcome gives the verdict,
// the evidence and the fix.
struct Emit {
  std::vector<Finding>& out;
  std::string id, title;
  void operator()(Verdict v, std::string evidence, std::string fix = "") const {
    add(out, id, kGroup, title, v, std::move(evidence), std::move(fix));
  }
};

// The checks below share one form: skip when NVML did not report the facts, build the evidence, then a ladder
// fail / warn / ok. `duplicates` pairs their ladders by shape; each is its own decision (which facts, which
// thresholds, which fix), and what they do share, the finding's id, title and group, is Emit.
void check_memory(const GpuFacts& g, const Emit& emit) {
  if (!g.mem_total) {
    emit(Verdict::kSkip, "NVML does not report memory");
    return;
  }
  std::string ev =
      "total " + gib(*g.mem_total) + ", used " + gib(g.mem_used.value_or(0)) + ", free " + gib(g.mem_free.value_or(0));
  uint64_t others = 0;
  if (g.processes) {
    std::vector<GpuProcess> ps = *g.processes;
    std::sort(ps.begin(), ps.end(),
              [](const GpuProcess& a, const GpuProcess& b) { return a.used_bytes > b.used_bytes; });
    for (const GpuProcess& pr : ps) {
      others += pr.used_bytes;
      ev += strfmt("; pid %u %s holds %s", pr.pid, pr.name.empty() ? "(name unknown)" : pr.name.c_str(),
                   gib(pr.used_bytes).c_str());
    }
    if (ps.empty()) ev += "; no processes";
  } else {
    ev += "; processes not readable";
  }
  const double free_frac = static_cast<double>(g.mem_free.value_or(0)) / static_cast<double>(*g.mem_total);
  if (free_frac < kFreeFailFraction) {
    emit(Verdict::kFail, ev + ": almost no memory is free",
         "Stop the processes holding the GPU (or pick another GPU with CUDA_VISIBLE_DEVICES); mopt needs room for the "
         "weights and a KV cache.");
  } else if (others >= kOthersWarnBytes ||
             (!g.processes &&
              g.mem_used.value_or(0) > static_cast<uint64_t>(0.1 * static_cast<double>(*g.mem_total)))) {
    emit(Verdict::kWarn, ev + ": other processes hold memory",
         "mopt's --gpu-memory-utilization budget counts memory in use by others, so its KV cache shrinks by that "
         "much: stop them, or give mopt a GPU of its own.");
  } else {
    emit(Verdict::kOk, ev);
  }
}

void check_ecc(const GpuFacts& g, const Emit& emit) {
  if (!g.ecc_enabled) {
    emit(Verdict::kSkip, "ECC not supported on this GPU");
    return;
  }
  const uint64_t cv = g.ecc_corrected_volatile.value_or(0), uv = g.ecc_uncorrected_volatile.value_or(0);
  const uint64_t ca = g.ecc_corrected_aggregate.value_or(0), ua = g.ecc_uncorrected_aggregate.value_or(0);
  std::string ev = strfmt(
      "ECC %s%s; errors since driver load: %llu corrected, %llu uncorrected; lifetime: %llu "
      "corrected, %llu uncorrected",
      *g.ecc_enabled ? "on" : "off",
      g.ecc_pending && *g.ecc_pending != *g.ecc_enabled ? " (a change is pending a reboot)" : "",
      static_cast<unsigned long long>(cv), static_cast<unsigned long long>(uv), static_cast<unsigned long long>(ca),
      static_cast<unsigned long long>(ua));
  if (uv > 0) {
    emit(Verdict::kFail, ev,
         "Uncorrectable memory errors since the driver loaded: results computed on this GPU may be wrong. Drain it, "
         "reset it (nvidia-smi -r -i N) and run NVIDIA's diagnostics (dcgmi diag -r 3); replace it if they recur.");
  } else if (ua > 0 || (g.ecc_pending && *g.ecc_pending != *g.ecc_enabled)) {
    emit(Verdict::kWarn, ev,
         ua > 0 ? "Uncorrectable errors happened before (lifetime count): watch this GPU; check retired/remapped "
                  "memory below and run dcgmi diag."
                : "An ECC mode change waits for a reboot or GPU reset.");
  } else if (!*g.ecc_enabled) {
    emit(Verdict::kWarn, ev,
         "Memory errors go undetected with ECC off: enable it (sudo nvidia-smi -e 1, then reboot) unless the ~6% "
         "memory it costs is worth the risk.");
  } else {
    emit(Verdict::kOk, ev);
  }
}

void check_pages(const GpuFacts& g, const Emit& emit) {
  if (!g.remapped_correctable && !g.retired_sbe && !g.retired_dbe) {
    emit(Verdict::kSkip, "not reported on this GPU");
    return;
  }
  std::string ev;
  if (g.remapped_correctable)
    ev = strfmt("remapped rows: %u correctable, %u uncorrectable%s%s", *g.remapped_correctable,
                g.remapped_uncorrectable.value_or(0), g.remap_pending.value_or(false) ? ", remap pending" : "",
                g.remap_failure.value_or(false) ? ", REMAP FAILURE" : "");
  if (g.retired_sbe || g.retired_dbe)
    join_to(ev,
            strfmt("retired pages: %u single-bit, %u double-bit%s", g.retired_sbe.value_or(0),
                   g.retired_dbe.value_or(0), g.retired_pending.value_or(false) ? ", retirement pending" : ""),
            "; ");
  if (g.remap_failure.value_or(false)) {
    emit(Verdict::kFail, ev,
         "Row remapping failed (no spare rows left): the GPU keeps failing memory and should be replaced (RMA).");
  } else if (g.remap_pending.value_or(false) || g.retired_pending.value_or(false)) {
    emit(Verdict::kWarn, ev,
         "Bad memory is marked but not yet fenced off: reset the GPU (nvidia-smi -r -i N) or reboot to apply it.");
  } else if (g.remapped_uncorrectable.value_or(0) > 0 || g.retired_dbe.value_or(0) > 0) {
    emit(Verdict::kWarn, ev,
         "Memory failed uncorrectably before and was fenced off; watch for more (dcgmi diag) and plan a replacement "
         "if the count grows.");
  } else {
    emit(Verdict::kOk, ev);
  }
}

void check_persistence(const GpuFacts& g, const Emit& emit) {
  if (!g.persistence) {
    emit(Verdict::kSkip, "not reported");
  } else if (*g.persistence) {
    emit(Verdict::kOk, "persistence mode on");
  } else {
    emit(Verdict::kWarn, "persistence mode off: the driver tears the GPU state down whenever no process uses it",
         "Each start then pays the GPU's initialization again (seconds on large GPUs): run nvidia-persistenced, or "
         "sudo nvidia-smi -pm 1.");
  }
}

void check_pcie(const GpuFacts& g, const Emit& emit) {
  if (!g.pcie_gen || !g.pcie_gen_max || !g.pcie_width || !g.pcie_width_max) {
    emit(Verdict::kSkip, "not reported");
    return;
  }
  const std::string ev = strfmt("Gen%u x%u (max Gen%u x%u)%s", *g.pcie_gen, *g.pcie_width, *g.pcie_gen_max,
                                *g.pcie_width_max, g.pstate ? strfmt(", P%d", *g.pstate).c_str() : "");
  const std::string fix =
      "A link trained below its maximum moves weights and swapped KV blocks that much slower: reseat the card, "
      "use a x16 slot wired to the CPU, check riser cables and the BIOS PCIe speed setting.";
  if (*g.pcie_width < *g.pcie_width_max) {
    emit(Verdict::kWarn, ev + ": the link is narrower than the GPU supports", fix);
  } else if (*g.pcie_gen < *g.pcie_gen_max) {
    // An idle GPU lowers its link speed to save power; only a busy one (P0) should be at full speed.
    if (g.pstate && *g.pstate > 0)
      emit(Verdict::kOk, ev + ": below the maximum speed while idle (power saving); it should reach Gen" +
                             std::to_string(*g.pcie_gen_max) + " under load");
    else
      emit(Verdict::kWarn, ev + ": below the maximum speed at full performance state", fix);
  } else {
    emit(Verdict::kOk, ev);
  }
}

std::string throttle_names(uint64_t r) {
  static const std::pair<uint64_t, const char*> kNames[] = {{kThrottleGpuIdle, "idle"},
                                                            {kThrottleAppClocks, "application clocks"},
                                                            {kThrottleSwPowerCap, "power cap"},
                                                            {kThrottleHwSlowdown, "HW slowdown"},
                                                            {kThrottleSyncBoost, "sync boost"},
                                                            {kThrottleSwThermal, "SW thermal slowdown"},
                                                            {kThrottleHwThermal, "HW thermal slowdown"},
                                                            {kThrottleHwPowerBrake, "HW power brake"},
                                                            {kThrottleDisplayClock, "display clock"}};
  std::string s;
  for (const auto& [bit, name] : kNames)
    if (r & bit) join_to(s, name);
  return s.empty() ? "none" : s;
}

void check_clocks(const GpuFacts& g, const Emit& emit) {
  std::string ev;
  if (g.clock_sm && g.clock_sm_max) ev += strfmt("SM %u/%u MHz", *g.clock_sm, *g.clock_sm_max);
  if (g.clock_mem && g.clock_mem_max) ev += strfmt(", memory %u/%u MHz", *g.clock_mem, *g.clock_mem_max);
  if (g.throttle) ev += "; clock event reasons: " + throttle_names(*g.throttle);
  if (g.temp_c)
    ev += strfmt("; %u C%s", *g.temp_c,
                 g.temp_slowdown_c ? strfmt(" (slowdown at %u C)", *g.temp_slowdown_c).c_str() : "");
  if (g.power_mw && g.power_limit_mw)
    ev += strfmt("; power %.0f / %.0f W", *g.power_mw / 1000.0, *g.power_limit_mw / 1000.0);
  if (ev.empty()) {
    emit(Verdict::kSkip, "not reported");
    return;
  }
  const uint64_t r = g.throttle.value_or(0);
  const bool thermal = r & (kThrottleSwThermal | kThrottleHwThermal);
  const bool hw = r & (kThrottleHwSlowdown | kThrottleHwPowerBrake);
  const bool hot = g.temp_c && g.temp_slowdown_c && *g.temp_c + kTempMarginC >= *g.temp_slowdown_c;
  if (thermal || hot) {
    emit(Verdict::kWarn, ev + (thermal ? ": clocks are cut for heat" : ": close to the slowdown temperature"),
         "Check the airflow, fans and inlet temperature of the server (nvidia-smi -q -d PERFORMANCE,TEMPERATURE); "
         "a throttled GPU decodes proportionally slower.");
  } else if (hw) {
    emit(Verdict::kWarn, ev + ": the hardware is slowing the clocks",
         "HW slowdown / power brake come from the board (power supply, external brake signal, overheating): check the "
         "PSU and cabling and the BMC's event log.");
  } else {
    emit(Verdict::kOk, ev);
  }
}

void check_mig(const GpuFacts& g, const Emit& emit) {
  if (!g.mig_current) {
    emit(Verdict::kOk, "MIG not supported or off");
  } else if (*g.mig_current) {
    emit(Verdict::kWarn,
         strfmt("MIG mode on%s: CUDA sees MIG instances (slices of the GPU), not the whole GPU",
                g.mig_pending && *g.mig_pending != *g.mig_current ? " (off after the next reset)" : ""),
         "mopt runs on one instance with its memory and SMs only. For the whole GPU: sudo nvidia-smi -i N -mig 0 "
         "and reset the GPU; otherwise select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid>.");
  } else if (g.mig_pending && *g.mig_pending) {
    emit(Verdict::kWarn, "MIG off, but turned on at the next GPU reset",
         "Cancel with sudo nvidia-smi -i N -mig 0 unless MIG is wanted.");
  } else {
    emit(Verdict::kOk, "MIG off");
  }
}

void check_xids(const KernelLog& log, bool have_gpu, std::vector<Finding>& out) {
  const Emit emit{out, "kernel.xid", "Xid errors in the kernel log"};
  if (!have_gpu) {
    emit(Verdict::kSkip, "no GPU");
    return;
  }
  if (!log.readable) {
    emit(Verdict::kSkip, "kernel log not readable (" + log.source + ")",
         "Run doctor as root (or with kernel.dmesg_restrict=0) to check for Xid errors.");
    return;
  }
  if (log.xids.empty()) {
    emit(Verdict::kOk, "no Xid errors in " + log.source);
    return;
  }
  bool hardware = false;
  std::string ev = strfmt("%zu Xid event(s) in %s; last: ", log.xids.size(), log.source.c_str()) + log.xids.back().line;
  for (const XidEvent& e : log.xids) hardware |= xid_is_hardware(e.xid);
  if (hardware)
    emit(Verdict::kFail, ev,
         "Xids 48/63/64/74/79/92/94/95/119/120 report hardware or driver faults: drain the GPU, reset it, run dcgmi "
         "diag and look the codes up in NVIDIA's Xid catalog.");
  else
    emit(Verdict::kWarn, ev,
         "Application-level Xids (e.g. 13, 31, 43: a kernel faulted) point at a crashing program; check which process "
         "it was (pid in the message).");
}

}  // namespace

std::vector<Finding> check_gpu_health(const GpuSystem& s, const KernelLog& log) {
  std::vector<Finding> out;
  // Per GPU, in this order: {id suffix, title after "GPU N", check}.
  static constexpr struct {
    const char* id;
    const char* title;
    void (*check)(const GpuFacts&, const Emit&);
  } kChecks[] = {{"memory", "memory", check_memory},
                 {"ecc", "ECC", check_ecc},
                 {"pages", "retired / remapped memory", check_pages},
                 {"persistence", "persistence mode", check_persistence},
                 {"pcie", "PCIe link", check_pcie},
                 {"clocks", "clocks, temperature, power", check_clocks},
                 {"mig", "MIG", check_mig}};
  for (const GpuFacts& g : s.gpus)
    for (const auto& c : kChecks)
      c.check(g, Emit{out, strfmt("gpu%d.%s", g.index, c.id), strfmt("GPU %d %s", g.index, c.title)});
  check_xids(log, !s.gpus.empty() || s.driver.kernel_module_loaded, out);
  return out;
}

}  // namespace mopt::doctor
