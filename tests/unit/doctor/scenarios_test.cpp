// mopt doctor on simulated machines: a fake NVML and a fake libcuda (tests/unit/doctor/fake) play the GPUs and
// driver, a temporary directory plays /proc, /sys and /dev ($MOPT_DOCTOR_ROOT). Each scenario's verdicts are the
// ones docs/doctor.md's rules give for the facts fake_machine.h describes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "doctor/doctor.h"

namespace mopt::doctor {
namespace {

namespace fs = std::filesystem;

// How the fake machine's /proc, /sys and /dev look.
struct Root {
  std::string kernel_module = "570.86.15";  // "" = no /proc/driver/nvidia/version
  int dev_gpus = 1;                         // /dev/nvidia0 .. N-1 (+ nvidiactl, nvidia-uvm when > 0)
  std::string kmsg = "6,100,1000,-;nvidia: module license 'NVIDIA' taints kernel.\n";
  std::vector<int> numa = {};  // numa_node of GPU i's PCI device (bus 0x1b + 0x20 i)
};

class DoctorScenario : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mopt_doctor_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* v : {"MOPT_NVML_LIB", "MOPT_CUDA_DRIVER_LIB", "MOPT_DOCTOR_ROOT", "MOPT_FAKE_GPU"}) unsetenv(v);
    fs::remove_all(dir_);
  }

  void write(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(dir_) / "root" / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  void make_root(const Root& r) {
    fs::create_directories(fs::path(dir_) / "root/dev/shm");
    if (!r.kernel_module.empty())
      write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  " + r.kernel_module +
                                              "  Thu Jan  9 22:41:55 UTC 2025\nGCC version:  gcc version 12.2.0\n");
    for (int i = 0; i < r.dev_gpus; ++i) write("dev/nvidia" + std::to_string(i), "");
    if (r.dev_gpus > 0) {
      write("dev/nvidiactl", "");
      write("dev/nvidia-uvm", "");
    }
    write("dev/kmsg", r.kmsg);
    for (size_t i = 0; i < r.numa.size(); ++i) {
      char bus[32];
      std::snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x1b + 0x20 * static_cast<int>(i));
      write(std::string("sys/bus/pci/devices/") + bus + "/numa_node", std::to_string(r.numa[i]) + "\n");
    }
  }

  void point_at_fakes(const std::string& scenario, const std::string& nvml_lib = MOPT_FAKE_NVML) {
    setenv("MOPT_NVML_LIB", nvml_lib.c_str(), 1);
    setenv("MOPT_CUDA_DRIVER_LIB", MOPT_FAKE_CUDA, 1);
    setenv("MOPT_DOCTOR_ROOT", (dir_ + "/root").c_str(), 1);
    setenv("MOPT_FAKE_GPU", scenario.c_str(), 1);
  }

  // The build the verdicts are judged against: CUDA 12.8 runtime, sm_90a code + compute_80 PTX (the default).
  static BuildInfo cuda_build() {
    BuildInfo b;
    b.cudart_version = 12080;
    b.cuda_archs = "90a-real;80-virtual";
    return b;
  }

  Report run(const std::string& scenario, const Root& root = {}) {
    make_root(root);
    point_at_fakes(scenario);
    DoctorOptions o;
    o.build = cuda_build();
    return run_doctor(o);
  }

  static Verdict verdict(const Report& r, const std::string& id) {
    const Finding* f = r.find(id);
    EXPECT_NE(f, nullptr) << "no finding " << id;
    return f ? f->verdict : Verdict::kSkip;
  }
  static std::string evidence(const Report& r, const std::string& id) {
    const Finding* f = r.find(id);
    return f ? f->evidence : "";
  }

  std::string dir_;
};

// Every GPU-related finding of the healthy machine is ok.
TEST_F(DoctorScenario, HealthyH100) {
  const Report r = run("h100");
  for (const char* id :
       {"driver.present", "driver.version_match", "driver.cuda_version", "gpu0.arch", "gpu0.memory", "gpu0.ecc",
        "gpu0.pages", "gpu0.persistence", "gpu0.pcie", "gpu0.clocks", "gpu0.mig", "kernel.xid", "host.dev_nodes"})
    EXPECT_EQ(verdict(r, id), Verdict::kOk) << id << ": " << evidence(r, id);
  EXPECT_EQ(verdict(r, "topology.gpus"), Verdict::kSkip);
  EXPECT_NE(evidence(r, "gpu0.arch").find("90a-real"), std::string::npos) << evidence(r, "gpu0.arch");
  const auto& g = r.facts["gpu"]["gpus"][0];
  EXPECT_EQ(g["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g["memory"]["total_bytes"], 81559ull << 20);
  EXPECT_EQ(g["pcie"].dump(), R"({"gen":5,"gen_max":5,"width":16,"width_max":16})");
  EXPECT_EQ(g["clocks_mhz"].dump(), R"({"sm":1980,"sm_max":1980,"mem":2619,"mem_max":2619})");
  EXPECT_EQ(r.facts["gpu"]["driver"]["driver_version"], "570.86.15");
  EXPECT_EQ(r.facts["gpu"]["driver"]["cuda_version"], "12.8");
  EXPECT_EQ(r.facts["gpu"]["driver"]["cuda_device_count"], 1);
}

TEST_F(DoctorScenario, DriverTooOldForTheRuntime) {
  const Report r = run("old_driver", Root{.kernel_module = "470.256.02"});
  EXPECT_EQ(verdict(r, "driver.cuda_version"), Verdict::kFail) << evidence(r, "driver.cuda_version");
  EXPECT_NE(evidence(r, "driver.cuda_version").find("CUDA 11.4"), std::string::npos);
  EXPECT_NE(evidence(r, "driver.cuda_version").find("12.8"), std::string::npos);
  EXPECT_EQ(r.exit_code(), 2);
}

TEST_F(DoctorScenario, OlderMinorDriverIsAWarning) {
  const Report r = run("minor_driver", Root{.kernel_module = "550.54.15"});
  EXPECT_EQ(verdict(r, "driver.cuda_version"), Verdict::kWarn) << evidence(r, "driver.cuda_version");
  EXPECT_EQ(verdict(r, "driver.version_match"), Verdict::kOk);
}

// nvmlInit fails with "Driver/library version mismatch"; the user-space version comes from the library's file name.
TEST_F(DoctorScenario, KernelAndUserSpaceMismatch) {
  make_root(Root{.kernel_module = "570.86.15"});
  const std::string lib = dir_ + "/libnvidia-ml.so.565.57.01";
  fs::copy_file(MOPT_FAKE_NVML, lib);
  point_at_fakes("mismatch", lib);
  DoctorOptions o;
  o.build = cuda_build();
  const Report r = run_doctor(o);
  EXPECT_EQ(verdict(r, "driver.present"), Verdict::kFail) << evidence(r, "driver.present");
  EXPECT_EQ(verdict(r, "driver.version_match"), Verdict::kFail);
  const std::string ev = evidence(r, "driver.version_match");
  EXPECT_NE(ev.find("kernel module 570.86.15"), std::string::npos) << ev;
  EXPECT_NE(ev.find("user-space 565.57.01"), std::string::npos) << ev;
  EXPECT_NE(r.find("driver.version_match")->fix.find("reboot"), std::string::npos);
}

TEST_F(DoctorScenario, EccErrors) {
  Root root;
  root.kmsg += "4,200,2000,-;NVRM: Xid (PCI:0000:1b:00): 48, pid=777, name=python3, DBE (0x2,0x1)\n";
  const Report r = run("ecc", root);
  EXPECT_EQ(verdict(r, "gpu0.ecc"), Verdict::kFail) << evidence(r, "gpu0.ecc");
  EXPECT_NE(evidence(r, "gpu0.ecc").find("15 corrected, 2 uncorrected"), std::string::npos) << evidence(r, "gpu0.ecc");
  EXPECT_EQ(verdict(r, "gpu0.pages"), Verdict::kWarn) << evidence(r, "gpu0.pages");
  EXPECT_EQ(verdict(r, "kernel.xid"), Verdict::kFail) << evidence(r, "kernel.xid");
  EXPECT_EQ(verdict(r, "gpu0.pcie"), Verdict::kOk);
  EXPECT_EQ(r.exit_code(), 2);
}

TEST_F(DoctorScenario, PcieGen1x8) {
  const Report r = run("pcie_gen1_x8");
  EXPECT_EQ(verdict(r, "gpu0.pcie"), Verdict::kWarn);
  EXPECT_NE(evidence(r, "gpu0.pcie").find("Gen1 x8 (max Gen5 x16)"), std::string::npos) << evidence(r, "gpu0.pcie");
  EXPECT_EQ(verdict(r, "gpu0.clocks"), Verdict::kOk);
}

TEST_F(DoctorScenario, ThermalThrottling) {
  const Report r = run("thermal");
  EXPECT_EQ(verdict(r, "gpu0.clocks"), Verdict::kWarn);
  const std::string ev = evidence(r, "gpu0.clocks");
  EXPECT_NE(ev.find("HW thermal slowdown"), std::string::npos) << ev;
  EXPECT_NE(ev.find("91 C (slowdown at 87 C)"), std::string::npos) << ev;
  EXPECT_NE(ev.find("SM 1245/1980 MHz"), std::string::npos) << ev;
  EXPECT_EQ(verdict(r, "gpu0.memory"), Verdict::kOk);
}

TEST_F(DoctorScenario, MemoryHeldByAnotherProcess) {
  const Report r = run("memory_held");
  EXPECT_EQ(verdict(r, "gpu0.memory"), Verdict::kWarn);
  EXPECT_NE(evidence(r, "gpu0.memory").find("pid 4242 python3 holds 61.0 GiB"), std::string::npos)
      << evidence(r, "gpu0.memory");
}

TEST_F(DoctorScenario, MigOn) {
  const Report r = run("mig");
  EXPECT_EQ(verdict(r, "gpu0.mig"), Verdict::kWarn) << evidence(r, "gpu0.mig");
  EXPECT_EQ(verdict(r, "gpu0.ecc"), Verdict::kOk);
}

// The driver is installed but there is no GPU: the GPU checks skip, the CPU path is still checked.
TEST_F(DoctorScenario, NoGpu) {
  const Report r = run("no_gpu", Root{.kernel_module = "", .dev_gpus = 0});
  EXPECT_EQ(verdict(r, "driver.present"), Verdict::kSkip);
  EXPECT_NE(evidence(r, "driver.present").find("reports no GPU"), std::string::npos) << evidence(r, "driver.present");
  for (const char* id : {"kernel.xid", "topology.gpus", "host.dev_nodes"})
    EXPECT_EQ(verdict(r, id), Verdict::kSkip) << id;
  EXPECT_EQ(r.find("gpu0.memory"), nullptr);
  EXPECT_NE(r.find("cpu.features"), nullptr);
  EXPECT_NE(r.find("cpu.hugepages"), nullptr);
}

// No driver at all (no NVML library, no kernel module): doctor says so.
TEST_F(DoctorScenario, NoDriverAtAll) {
  make_root(Root{.kernel_module = "", .dev_gpus = 0});
  point_at_fakes("h100", dir_ + "/no-such-libnvidia-ml.so.1");
  setenv("MOPT_CUDA_DRIVER_LIB", (dir_ + "/no-such-libcuda.so.1").c_str(), 1);
  DoctorOptions o;
  o.build = cuda_build();
  const Report r = run_doctor(o);
  EXPECT_EQ(verdict(r, "driver.present"), Verdict::kSkip);
  EXPECT_NE(evidence(r, "driver.present").find("no NVIDIA driver"), std::string::npos) << evidence(r, "driver.present");
  EXPECT_NE(r.find("cpu.features"), nullptr);
}

// The kernel module is there but the libraries are not: a container started without the NVIDIA runtime.
TEST_F(DoctorScenario, ContainerWithoutDriverLibraries) {
  make_root(Root{});
  point_at_fakes("h100", dir_ + "/no-such-libnvidia-ml.so.1");
  DoctorOptions o;
  o.build = cuda_build();
  const Report r = run_doctor(o);
  EXPECT_EQ(verdict(r, "driver.present"), Verdict::kFail) << evidence(r, "driver.present");
  EXPECT_NE(r.find("driver.present")->fix.find("--gpus all"), std::string::npos);
}

TEST_F(DoctorScenario, MissingUvmDeviceNode) {
  make_root(Root{});
  fs::remove(fs::path(dir_) / "root/dev/nvidia-uvm");
  point_at_fakes("h100");
  DoctorOptions o;
  o.build = cuda_build();
  const Report r = run_doctor(o);
  EXPECT_EQ(verdict(r, "host.dev_nodes"), Verdict::kFail);
  EXPECT_NE(evidence(r, "host.dev_nodes").find("missing /dev/nvidia-uvm"), std::string::npos);
}

TEST_F(DoctorScenario, FourGpusInNvlinkPairs) {
  const Report r = run("four_gpus", Root{.dev_gpus = 4, .numa = {0, 0, 1, 1}});
  EXPECT_EQ(verdict(r, "topology.gpus"), Verdict::kWarn) << evidence(r, "topology.gpus");
  const std::string ev = evidence(r, "topology.gpus");
  EXPECT_NE(ev.find("0-1 NVLink"), std::string::npos) << ev;
  EXPECT_NE(ev.find("0-2 across CPU sockets"), std::string::npos) << ev;
  EXPECT_NE(ev.find("NVLink groups of 2: [0,1] [2,3]"), std::string::npos) << ev;
  EXPECT_NE(ev.find("GPU 3 on NUMA node 1"), std::string::npos) << ev;
  EXPECT_EQ(r.facts["gpu"]["gpus"].size(), 4u);
  EXPECT_EQ(r.facts["gpu"]["gpus"][2]["nvlinks_active"], 18);
}

// The binary: --json parses, its exit code is the worst verdict, and the GPU facts come through.
TEST_F(DoctorScenario, BinaryJsonAndExitCode) {
  const char* bin = std::getenv("MOPT_BIN");
  if (!bin) GTEST_SKIP() << "MOPT_BIN not set (run through ctest)";
  for (const char* scenario : {"h100", "ecc"}) {
    SCOPED_TRACE(scenario);
    fs::remove_all(fs::path(dir_) / "root");
    make_root(Root{});
    point_at_fakes(scenario);
    const std::string out = dir_ + "/out.json";
    const int st = std::system((std::string(bin) + " doctor --json > " + out).c_str());
    ASSERT_TRUE(WIFEXITED(st));
    std::ifstream f(out);
    const auto j = nlohmann::json::parse(f);
    int worst = 0;
    for (const auto& c : j["checks"]) {
      if (c["verdict"] == "fail") {
        worst = 2;
      } else if (c["verdict"] == "warn" && worst < 1) {
        worst = 1;
      }
    }
    EXPECT_EQ(WEXITSTATUS(st), worst);
    EXPECT_EQ(j["exit_code"], worst);
    EXPECT_EQ(j["facts"]["gpu"]["gpus"][0]["uuid"], "GPU-0b5a3f52-0000-0000-0000-000000000000");
    if (std::string(scenario) == "ecc") {
      EXPECT_EQ(worst, 2);
    }
  }
}

}  // namespace
}  // namespace mopt::doctor
