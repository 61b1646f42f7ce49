/* The machines the fake NVML (fake_nvml.c) and fake CUDA driver (fake_cuda.c) simulate for the doctor tests,
 * chosen by $MOPT_FAKE_GPU (re-read at every nvmlInit_v2 / cuInit). Figures of the healthy machine follow an H100
 * SXM5 80GB as nvidia-smi -q reports one; each scenario changes what its name says.
 *   h100          healthy: driver 570.86.15 (CUDA 12.8), ECC on, Gen5 x16, P0, no throttling, MIG off
 *   old_driver    driver 470.256.02, CUDA 11.4
 *   minor_driver  driver 550.54.15, CUDA 12.4 (older minor version than a 12.8 runtime)
 *   mismatch      nvmlInit_v2 -> NVML_ERROR_LIB_RM_VERSION_MISMATCH, cuInit -> CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
 *   ecc           2 uncorrected + 15 corrected volatile ECC errors, 1 uncorrectable remapped row, remap pending
 *   pcie_gen1_x8  link at Gen1 x8 of Gen5 x16 while in P0
 *   thermal       SW + HW thermal slowdown, 91 C (slowdown at 87 C), SM clock 1245 of 1980 MHz
 *   memory_held   pid 4242 (python3) holds 61 GiB
 *   mig           MIG mode on
 *   no_gpu        driver loaded, 0 GPUs; cuInit -> CUDA_ERROR_NO_DEVICE
 *   four_gpus     4 healthy H100s, NVLink pairs (0,1) and (2,3), the pairs on different sockets */
#ifndef MOPT_FAKE_MACHINE_H
#define MOPT_FAKE_MACHINE_H

#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_GPUS 4

typedef struct {
  unsigned pid;
  const char* name;
  unsigned long long used;
} FakeProcess;

typedef struct {
  const char* name;
  const char* uuid;
  unsigned bus; /* PCI bus number: bus id 00000000:<bus>:00.0 */
  int cc_major, cc_minor;
  unsigned long long mem_total, mem_used;
  int n_procs;
  FakeProcess procs[2];
  int ecc_on;
  unsigned long long ecc_corr_vol, ecc_unc_vol, ecc_corr_agg, ecc_unc_agg;
  unsigned remap_corr, remap_unc, remap_pending, remap_failure;
  int persistence;
  unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  int pstate;
  unsigned sm, sm_max, mem_clk, mem_clk_max;
  unsigned long long throttle;
  unsigned temp, temp_slowdown, temp_shutdown;
  unsigned power_mw, power_limit_mw;
  unsigned mig;
  int nvlinks; /* active NVLink links */
} FakeGpu;

typedef struct {
  const char* driver_version;
  int cuda_version;
  int nvml_init_ret;
  int cu_init_ret;
  int n_gpus;
  FakeGpu gpu[FAKE_MAX_GPUS];
  int nvlink[FAKE_MAX_GPUS][FAKE_MAX_GPUS];
  int socket[FAKE_MAX_GPUS];
} FakeMachine;

static const unsigned long long kFakeGiB = 1024ull * 1024 * 1024;

static FakeGpu fake_h100(int i) {
  static const char* uuids[FAKE_MAX_GPUS] = {
      "GPU-0b5a3f52-0000-0000-0000-000000000000", "GPU-0b5a3f52-0000-0000-0000-000000000001",
      "GPU-0b5a3f52-0000-0000-0000-000000000002", "GPU-0b5a3f52-0000-0000-0000-000000000003"};
  FakeGpu g;
  memset(&g, 0, sizeof(g));
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = uuids[i];
  g.bus = 0x1b + 0x20 * (unsigned)i;
  g.cc_major = 9;
  g.cc_minor = 0;
  g.mem_total = 81559ull * 1024 * 1024;
  g.mem_used = 532ull * 1024 * 1024;
  g.ecc_on = 1;
  g.persistence = 1;
  g.pcie_gen = 5;
  g.pcie_gen_max = 5;
  g.pcie_width = 16;
  g.pcie_width_max = 16;
  g.pstate = 0;
  g.sm = 1980;
  g.sm_max = 1980;
  g.mem_clk = 2619;
  g.mem_clk_max = 2619;
  g.temp = 35;
  g.temp_slowdown = 87;
  g.temp_shutdown = 92;
  g.power_mw = 71000;
  g.power_limit_mw = 700000;
  return g;
}

/* The machine $MOPT_FAKE_GPU names (h100 when unset or unknown). */
static FakeMachine fake_machine(void) {
  const char* s = getenv("MOPT_FAKE_GPU");
  if (!s) s = "h100";
  FakeMachine m;
  memset(&m, 0, sizeof(m));
  m.driver_version = "570.86.15";
  m.cuda_version = 12080;
  m.n_gpus = 1;
  m.gpu[0] = fake_h100(0);
  FakeGpu* g = &m.gpu[0];
  if (!strcmp(s, "old_driver")) {
    m.driver_version = "470.256.02";
    m.cuda_version = 11040;
  } else if (!strcmp(s, "minor_driver")) {
    m.driver_version = "550.54.15";
    m.cuda_version = 12040;
  } else if (!strcmp(s, "mismatch")) {
    m.nvml_init_ret = 18;
    m.cu_init_ret = 803;
  } else if (!strcmp(s, "ecc")) {
    g->ecc_corr_vol = 15;
    g->ecc_unc_vol = 2;
    g->ecc_corr_agg = 40;
    g->ecc_unc_agg = 2;
    g->remap_unc = 1;
    g->remap_pending = 1;
  } else if (!strcmp(s, "pcie_gen1_x8")) {
    g->pcie_gen = 1;
    g->pcie_width = 8;
  } else if (!strcmp(s, "thermal")) {
    g->throttle = 0x20 | 0x40;
    g->temp = 91;
    g->sm = 1245;
    g->power_mw = 512000;
  } else if (!strcmp(s, "memory_held")) {
    g->mem_used = 62ull * kFakeGiB;
    g->n_procs = 1;
    g->procs[0].pid = 4242;
    g->procs[0].name = "python3";
    g->procs[0].used = 61ull * kFakeGiB;
  } else if (!strcmp(s, "mig")) {
    g->mig = 1;
  } else if (!strcmp(s, "no_gpu")) {
    m.n_gpus = 0;
    m.cu_init_ret = 100;
  } else if (!strcmp(s, "four_gpus")) {
    m.n_gpus = 4;
    for (int i = 0; i < 4; ++i) {
      m.gpu[i] = fake_h100(i);
      m.gpu[i].nvlinks = 18;
      m.socket[i] = i / 2;
    }
    m.nvlink[0][1] = m.nvlink[1][0] = 1;
    m.nvlink[2][3] = m.nvlink[3][2] = 1;
  }
  return m;
}

#endif
