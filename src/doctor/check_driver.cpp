// Driver and CUDA: is the driver there and loadable, do its kernel and user-space halves match, is it new enough
// for the CUDA runtime mopt was built with, and does the build have code for each GPU's architecture.
#include "doctor/checks.h"
#include "doctor/cuda_driver_api.h"
#include "doctor/nvml_api.h"

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "Driver and CUDA";  // this file's findings' group, as printed

constexpr const char* kContainerFix =
    "In a container, start it with the NVIDIA Container Toolkit (docker run --gpus all, or the nvidia runtime) so "
    "the driver's libraries and /dev/nvidia* are mounted; on the host, reinstall the driver.";

void check_present(const GpuSystem& s, std::vector<Finding>& out) {
  const DriverFacts& f = s.driver;
  const char* g = kGroup;
  const char* t = "NVIDIA driver";
  if (!f.nvml_loaded) {
    if (!f.kernel_module_loaded) {
      add(out, "driver.present", g, t, Verdict::kSkip,
          "no NVIDIA driver on this machine (" + f.nvml_load_error +
              "; no /proc/driver/nvidia): no GPU to use, mopt runs on the CPU (the checks below cover that path)");
      return;
    }
    add(out, "driver.present", g, t, Verdict::kFail,
        "the nvidia kernel module is loaded (" + f.kernel_version +
            ") but the user-space library is not: " + f.nvml_load_error,
        kContainerFix);
    return;
  }
  if (f.nvml_init == kNvmlErrorLibRmVersionMismatch) {
    add(out, "driver.present", g, t, Verdict::kFail, "NVML cannot start: " + f.nvml_init_error,
        "The kernel module and the user-space libraries come from different driver versions (see "
        "driver.version_match): reboot, or unload and reload the nvidia modules, after a driver upgrade.");
    return;
  }
  if (f.nvml_init == kNvmlErrorDriverNotLoaded) {
    add(out, "driver.present", g, t, Verdict::kFail, "NVML: " + f.nvml_init_error + " (" + f.nvml_path + ")",
        "The nvidia kernel module is not loaded: run 'sudo modprobe nvidia' and read 'dmesg | grep -i nvrm' for why "
        "it failed (Secure Boot without a signed module is a common cause).");
    return;
  }
  if (f.nvml_init != kNvmlSuccess) {
    add(out, "driver.present", g, t, Verdict::kFail, "NVML cannot start: " + f.nvml_init_error,
        "Read 'dmesg | grep -i nvrm' and nvidia-smi's output; reinstall the driver if nvidia-smi fails too.");
    return;
  }
  if (s.gpus.empty()) {
    add(out, "driver.present", g, t, Verdict::kSkip,
        "driver " + f.user_version + " is installed but reports no GPU: mopt runs on the CPU");
    return;
  }
  if (!f.cuda_loaded) {
    add(out, "driver.present", g, t, Verdict::kFail,
        strfmt("driver %s sees %zu GPU(s), but the CUDA driver library is missing: ", f.user_version.c_str(),
               s.gpus.size()) +
            f.cuda_load_error,
        kContainerFix + std::string(" (libcuda.so.1 must be mounted too: NVIDIA_DRIVER_CAPABILITIES=compute,utility)"));
    return;
  }
  if (f.cu_init != kCudaSuccess) {
    std::string fix = "Read 'dmesg | grep -i nvrm'; check that /dev/nvidia-uvm exists (sudo nvidia-modprobe -u -c=0).";
    if (f.cu_init == kCudaErrorSystemDriverMismatch)
      fix = "The kernel module and libcuda come from different driver versions: reboot after the driver upgrade.";
    else if (f.cu_init == kCudaErrorCompatNotSupportedOnDevice)
      fix =
          "A CUDA forward-compatibility package is installed that this GPU cannot use: remove it "
          "(cuda-compat) or install a driver that supports this CUDA version natively.";
    else if (f.cu_init == kCudaErrorNoDevice)
      fix =
          "NVML sees the GPU but CUDA does not: check CUDA_VISIBLE_DEVICES and, with MIG on, that a MIG instance "
          "exists and is selected.";
    add(out, "driver.present", g, t, Verdict::kFail,
        strfmt("NVML sees %zu GPU(s) but cuInit fails: ", s.gpus.size()) + f.cu_init_error + " (" + f.cuda_path + ")",
        fix);
    return;
  }
  add(out, "driver.present", g, t, Verdict::kOk,
      strfmt("driver %s, %zu GPU(s) via NVML, %d via CUDA (%s)", f.user_version.c_str(), s.gpus.size(),
             f.cuda_device_count, f.cuda_path.c_str()));
}

void check_version_match(const GpuSystem& s, std::vector<Finding>& out) {
  const DriverFacts& f = s.driver;
  const char* g = kGroup;
  const char* t = "Kernel module vs user-space driver";
  if (!f.kernel_module_loaded && !f.nvml_loaded) {
    add(out, "driver.version_match", g, t, Verdict::kSkip, "no NVIDIA driver");
    return;
  }
  const std::string k = f.kernel_version.empty() ? "unknown" : f.kernel_version;
  const std::string u = f.user_version.empty() ? "unknown" : f.user_version;
  const std::string ev = "kernel module " + k + " (/proc/driver/nvidia/version), user-space " + u + " (" +
                         (f.nvml_path.empty() ? "libnvidia-ml not loaded" : f.nvml_path) + ")";
  const bool mismatch = f.nvml_init == kNvmlErrorLibRmVersionMismatch || f.cu_init == kCudaErrorSystemDriverMismatch ||
                        (!f.kernel_version.empty() && !f.user_version.empty() && f.kernel_version != f.user_version);
  if (mismatch) {
    add(out, "driver.version_match", g, t, Verdict::kFail, ev + ": they differ (\"Driver/library version mismatch\")",
        "The driver was upgraded without reloading the kernel module: reboot, or stop every GPU process and run "
        "'sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia'. In a container, the host "
        "driver and the libraries mounted into the container must be the same version.");
  } else if (f.kernel_version.empty() || f.user_version.empty()) {
    add(out, "driver.version_match", g, t, Verdict::kSkip, ev + ": one side unknown");
  } else {
    add(out, "driver.version_match", g, t, Verdict::kOk, ev);
  }
}

void check_cuda_version(const GpuSystem& s, const BuildInfo& b, std::vector<Finding>& out) {
  const DriverFacts& f = s.driver;
  const char* g = kGroup;
  const char* t = "CUDA driver vs runtime";
  const int drv = f.cuda_version ? f.cuda_version : f.nvml_cuda_version;
  if (b.cudart_version == 0) {
    add(out, "driver.cuda_version", g, t, Verdict::kSkip,
        "this mopt was built without CUDA" +
            (drv ? " (the driver supports CUDA " + cuda_version_string(drv) + ")" : std::string()),
        "");
    return;
  }
  const std::string rt = cuda_version_string(b.cudart_version);
  if (drv == 0) {
    add(out, "driver.cuda_version", g, t, Verdict::kSkip, "mopt's CUDA runtime is " + rt + "; no driver to compare");
    return;
  }
  const std::string ev = "driver supports CUDA " + cuda_version_string(drv) + " (driver " + f.user_version +
                         "), mopt was built with the CUDA " + rt + " runtime";
  if (drv / 1000 < b.cudart_version / 1000) {
    add(out, "driver.cuda_version", g, t, Verdict::kFail, ev + ": the driver is too old for the runtime",
        strfmt("Install a driver that supports CUDA %d.x (NVIDIA's CUDA release notes list the minimum driver per "
               "version), or rebuild mopt with a CUDA %d.x toolkit.",
               b.cudart_version / 1000, drv / 1000));
  } else if (drv < b.cudart_version) {
    add(out, "driver.cuda_version", g, t, Verdict::kWarn,
        ev + ": older minor version (CUDA minor-version compatibility: native kernels run, PTX compiled by the newer "
             "toolkit cannot be JIT-compiled by this driver)",
        "Upgrade the driver to one that supports CUDA " + rt +
            ", or build mopt with native code (-DMOPT_CUDA_ARCHS) "
            "for this GPU so no PTX needs compiling.");
  } else {
    add(out, "driver.cuda_version", g, t, Verdict::kOk, ev);
  }
}

void check_archs(const GpuSystem& s, const BuildInfo& b, std::vector<Finding>& out) {
  for (const GpuFacts& gpu : s.gpus) {
    const std::string id = strfmt("gpu%d.arch", gpu.index);
    const std::string t = strfmt("GPU %d compute capability", gpu.index);
    if (gpu.cc_major < 0) {
      add(out, id, kGroup, t, Verdict::kSkip, "NVML does not report the compute capability");
      continue;
    }
    const std::string cc = strfmt("%d.%d", gpu.cc_major, gpu.cc_minor);
    const std::string ev = gpu.name + ": compute capability " + cc;
    if (gpu.cc_major < 8) {
      add(out, id, kGroup, t, Verdict::kFail, ev + "; the CUDA backend needs 8.0 or newer (bf16 tensor cores)",
          "Use an Ampere or newer GPU, or run on the CPU (--device cpu).");
      continue;
    }
    if (b.cudart_version == 0) {
      add(out, id, kGroup, t, Verdict::kSkip, ev + "; this mopt was built without CUDA", "");
      continue;
    }
    std::string via;
    switch (arch_support(b.cuda_archs, gpu.cc_major, gpu.cc_minor, &via)) {
      case ArchSupport::kNative:
        add(out, id, kGroup, t, Verdict::kOk,
            ev + ": native code compiled in (" + via + " of " + b.cuda_archs + ")");
        break;
      case ArchSupport::kPtxJit:
        add(out, id, kGroup, t, Verdict::kWarn,
            ev + ": no native code in the build (" + b.cuda_archs + "); the driver JIT-compiles the " + via +
                " PTX at the first start (slow start, cached in ~/.nv/ComputeCache), and Hopper-only kernels are "
                "absent",
            strfmt("Rebuild with -DMOPT_CUDA_ARCHS=\"%d%d-real;%s\" for native code.", gpu.cc_major, gpu.cc_minor,
                   b.cuda_archs.c_str()));
        break;
      case ArchSupport::kNone:
        add(out, id, kGroup, t, Verdict::kFail,
            ev + ": the build has no code this GPU can run (" + b.cuda_archs + ")",
            strfmt("Rebuild with -DMOPT_CUDA_ARCHS=\"%d%d-real;%s\".", gpu.cc_major, gpu.cc_minor,
                   b.cuda_archs.c_str()));
        break;
    }
  }
}

}  // namespace

std::vector<Finding> check_driver(const GpuSystem& s, const BuildInfo& build) {
  std::vector<Finding> out;
  check_present(s, out);
  check_version_match(s, out);
  check_cuda_version(s, build, out);
  check_archs(s, build, out);
  return out;
}

}  // namespace mopt::doctor
