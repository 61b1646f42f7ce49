// The parsers and rules under doctor's checks, against hand-written inputs in the formats the kernel, NVIDIA's
// driver and CMake produce, and the cpuid reading against the kernel's own /proc/cpuinfo flags.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "doctor/build_info.h"
#include "doctor/checks.h"
#include "doctor/dynlib.h"
#include "doctor/gpu_facts.h"
#include "doctor/host_facts.h"
#include "doctor/kernel_log.h"

namespace mopt::doctor {
namespace {

namespace fs = std::filesystem;

TEST(DoctorFacts, KernelModuleVersion) {
  EXPECT_EQ(parse_kernel_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                                        "22:23:56 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "550.54.15");
  EXPECT_EQ(parse_kernel_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release "
                                        "Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan  9 22:41:55 UTC 2025\n"),
            "570.86.15");
  EXPECT_EQ(parse_kernel_module_version("garbage"), "");
}

TEST(DoctorFacts, DriverVersionFromLibraryName) {
  EXPECT_EQ(version_from_library_name("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"), "550.54.15");
  EXPECT_EQ(version_from_library_name("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), "");
  EXPECT_EQ(version_from_library_name("/tmp/libfake.so"), "");
}

TEST(DoctorFacts, XidLines) {
  const std::string log =
      "6,1,100,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15\n"
      "4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
      "Mar  5 10:00:00 host kernel: [ 12.3] NVRM: Xid (PCI:0000:5e:00): 13, pid=1234, Graphics Exception\n";
  const auto x = parse_xids(log);
  ASSERT_EQ(x.size(), 2u);
  EXPECT_EQ(x[0].pci, "0000:3b:00");
  EXPECT_EQ(x[0].xid, 79);
  EXPECT_EQ(x[1].pci, "0000:5e:00");
  EXPECT_EQ(x[1].xid, 13);
  EXPECT_TRUE(xid_is_hardware(79));
  EXPECT_TRUE(xid_is_hardware(48));
  EXPECT_FALSE(xid_is_hardware(13));
}

TEST(DoctorFacts, ArchSupport) {
  const std::string def = "90a-real;80-virtual";
  std::string via;
  EXPECT_EQ(arch_support(def, 9, 0, &via), ArchSupport::kNative);  // H100 / H200
  EXPECT_EQ(via, "90a-real");
  EXPECT_EQ(arch_support(def, 8, 0, &via), ArchSupport::kPtxJit);  // A100: compute_80 PTX
  EXPECT_EQ(via, "80-virtual");
  EXPECT_EQ(arch_support(def, 8, 9), ArchSupport::kPtxJit);        // L40S, RTX 4090
  EXPECT_EQ(arch_support(def, 10, 0), ArchSupport::kPtxJit);       // B200: PTX JIT of compute_80
  EXPECT_EQ(arch_support(def, 7, 5), ArchSupport::kNone);          // T4
  EXPECT_EQ(arch_support("80-real", 8, 6), ArchSupport::kNative);  // sm_80 code runs on 8.6
  EXPECT_EQ(arch_support("86-real", 8, 0), ArchSupport::kNone);    // ... not the other way round
  EXPECT_EQ(arch_support("90a-real", 10, 0), ArchSupport::kNone);  // arch-specific code: 9.0 only
  EXPECT_EQ(arch_support("89", 8, 9), ArchSupport::kNative);
  EXPECT_EQ(arch_support("", 9, 0), ArchSupport::kNone);
}

TEST(DoctorFacts, TensorParallelGroups) {
  auto all = [](int n) { return std::vector<std::vector<bool>>(n, std::vector<bool>(n, true)); };
  EXPECT_EQ(tensor_parallel_groups(all(8)), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  std::vector<std::vector<bool>> pairs(4, std::vector<bool>(4, false));
  pairs[0][2] = pairs[2][0] = pairs[1][3] = pairs[3][1] = true;
  EXPECT_EQ(tensor_parallel_groups(pairs), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  std::vector<std::vector<bool>> none(2, std::vector<bool>(2, false));
  EXPECT_EQ(tensor_parallel_groups(none), (std::vector<std::vector<int>>{{0}, {1}}));
}

class CgroupRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mopt_cgroup_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("MOPT_DOCTOR_ROOT", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("MOPT_DOCTOR_ROOT");
    fs::remove_all(dir_);
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((fs::path(dir_) / rel).parent_path());
    std::ofstream(fs::path(dir_) / rel) << text;
  }
  std::string dir_;
};

// cgroup v2: the tightest limit on the way up wins; "max" is no limit.
TEST_F(CgroupRoot, V2LimitsWalkUp) {
  write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  write("sys/fs/cgroup/kubepods/memory.max", "17179869184\n");
  write("sys/fs/cgroup/kubepods/pod1/memory.max", "max\n");
  write("sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
  HostFacts h;
  read_cgroup_limits("0::/kubepods/pod1\n", h);
  EXPECT_EQ(h.cgroup_version, 2);
  ASSERT_TRUE(h.cgroup_mem_limit);
  EXPECT_EQ(*h.cgroup_mem_limit, 17179869184ull);
  ASSERT_TRUE(h.cgroup_cpus);
  EXPECT_DOUBLE_EQ(*h.cgroup_cpus, 2.5);
}

// cgroup v1: memory.limit_in_bytes (the huge "unlimited" value is no limit) and cfs quota / period.
TEST_F(CgroupRoot, V1Limits) {
  write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "8589934592\n");
  write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  write("sys/fs/cgroup/cpu/docker/abc/cpu.cfs_quota_us", "100000\n");
  write("sys/fs/cgroup/cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  HostFacts h;
  read_cgroup_limits("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n", h);
  EXPECT_EQ(h.cgroup_version, 1);
  ASSERT_TRUE(h.cgroup_mem_limit);
  EXPECT_EQ(*h.cgroup_mem_limit, 8589934592ull);
  ASSERT_TRUE(h.cgroup_cpus);
  EXPECT_DOUBLE_EQ(*h.cgroup_cpus, 1.0);
  // A CPU quota below the online CPUs is a warning with the --threads to pass.
  h.online_cpus = 8;
  h.affinity_cpus = 8;
  GpuSystem none;
  const auto f = check_host(none, h, 0);
  const Finding* cpu = nullptr;
  for (const Finding& x : f)
    if (x.id == "host.cgroup_cpu") cpu = &x;
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->verdict, Verdict::kWarn);
  EXPECT_NE(cpu->fix.find("--threads 1"), std::string::npos) << cpu->fix;
  // Weights larger than the memory limit fail the memory check.
  for (const Finding& x : check_host(none, h, uint64_t{9} << 30)) {
    if (x.id == "host.cgroup_memory") {
      EXPECT_EQ(x.verdict, Verdict::kFail) << x.evidence;
    }
  }
}

// cpuid (with XGETBV) agrees with the kernel's view in /proc/cpuinfo for every tracked feature.
TEST(DoctorFacts, CpuFeaturesMatchProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo";
  const HostFacts h = collect_host_facts();
  ASSERT_FALSE(h.cpu_features.empty());
  for (const CpuFeature& feat : h.cpu_features)
    EXPECT_EQ(feat.present, flags.find(" " + std::string(feat.name) + " ") != std::string::npos) << feat.name;
}

}  // namespace
}  // namespace mopt::doctor
