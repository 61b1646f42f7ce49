/* A fake libnvidia-ml for the doctor tests: exports the NVML entry points mopt calls (NVML API reference
 * signatures) and answers them from the machine in fake_machine.h that $MOPT_FAKE_GPU names. Handles are indices. */
#include <stdio.h>
#include <string.h>

#include "fake_machine.h"

typedef int nvmlReturn_t;
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7, NOT_FOUND = 6 };

static FakeMachine g_m;
static int g_init = 0;

#define DEV(d) ((d) ? &g_m.gpu[(size_t)(d)-1] : NULL)
#define CHECK_DEV(d)                 \
  if (!g_init) return UNINITIALIZED; \
  if (!(d) || (size_t)(d) > (size_t)g_m.n_gpus) return INVALID_ARGUMENT;

static int copy_str(char* out, unsigned len, const char* s) {
  if (strlen(s) + 1 > len) return INSUFFICIENT_SIZE;
  strcpy(out, s);
  return OK;
}

nvmlReturn_t nvmlInit_v2(void) {
  g_m = fake_machine();
  if (g_m.nvml_init_ret) return g_m.nvml_init_ret;
  g_init = 1;
  return OK;
}
nvmlReturn_t nvmlShutdown(void) {
  g_init = 0;
  return OK;
}
const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case OK:
      return "Success";
    case UNINITIALIZED:
      return "Uninitialized";
    case NOT_SUPPORTED:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case 18:
      return "Driver/library version mismatch";
    default:
      return "Unknown Error";
  }
}
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned len) {
  if (!g_init) return UNINITIALIZED;
  return copy_str(v, len, g_m.driver_version);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  if (!g_init) return UNINITIALIZED;
  *v = g_m.cuda_version;
  return OK;
}
nvmlReturn_t nvmlSystemGetProcessName(unsigned pid, char* name, unsigned len) {
  for (int i = 0; i < g_m.n_gpus; ++i)
    for (int p = 0; p < g_m.gpu[i].n_procs; ++p)
      if (g_m.gpu[i].procs[p].pid == pid) return copy_str(name, len, g_m.gpu[i].procs[p].name);
  return NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  if (!g_init) return UNINITIALIZED;
  *n = (unsigned)g_m.n_gpus;
  return OK;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (!g_init) return UNINITIALIZED;
  if (i >= (unsigned)g_m.n_gpus) return INVALID_ARGUMENT;
  *d = (void*)(size_t)(i + 1);
  return OK;
}
nvmlReturn_t nvmlDeviceGetName(void* d, char* s, unsigned len) {
  CHECK_DEV(d);
  return copy_str(s, len, DEV(d)->name);
}
nvmlReturn_t nvmlDeviceGetUUID(void* d, char* s, unsigned len) {
  CHECK_DEV(d);
  return copy_str(s, len, DEV(d)->uuid);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void* d, nvmlPciInfo_t* p) {
  CHECK_DEV(d);
  memset(p, 0, sizeof(*p));
  p->bus = DEV(d)->bus;
  snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "0000:%02X:00.0", p->bus);
  snprintf(p->busId, sizeof(p->busId), "00000000:%02X:00.0", p->bus);
  p->pciDeviceId = 0x233010de;
  return OK;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void* d, int* major, int* minor) {
  CHECK_DEV(d);
  *major = DEV(d)->cc_major;
  *minor = DEV(d)->cc_minor;
  return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void* d, nvmlMemory_t* m) {
  CHECK_DEV(d);
  m->total = DEV(d)->mem_total;
  m->used = DEV(d)->mem_used;
  m->free = m->total - m->used;
  return OK;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, nvmlProcessInfo_t* infos) {
  CHECK_DEV(d);
  const FakeGpu* g = DEV(d);
  if (*count < (unsigned)g->n_procs) {
    *count = (unsigned)g->n_procs;
    return INSUFFICIENT_SIZE;
  }
  for (int i = 0; i < g->n_procs; ++i) {
    infos[i].pid = g->procs[i].pid;
    infos[i].usedGpuMemory = g->procs[i].used;
    infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
  }
  *count = (unsigned)g->n_procs;
  return OK;
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void* d, unsigned* count, nvmlProcessInfo_t* infos) {
  CHECK_DEV(d);
  (void)infos;
  *count = 0;
  return OK;
}
nvmlReturn_t nvmlDeviceGetEccMode(void* d, int* current, int* pending) {
  CHECK_DEV(d);
  *current = *pending = DEV(d)->ecc_on;
  return OK;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(void* d, int type, int counter, unsigned long long* n) {
  CHECK_DEV(d);
  const FakeGpu* g = DEV(d);
  if (counter == 0)
    *n = type == 0 ? g->ecc_corr_vol : g->ecc_unc_vol;
  else
    *n = type == 0 ? g->ecc_corr_agg : g->ecc_unc_agg;
  return OK;
}
/* Hopper remaps rows; page retirement is a pre-Ampere feature. */
nvmlReturn_t nvmlDeviceGetRetiredPages(void* d, int cause, unsigned* count, unsigned long long* addr) {
  CHECK_DEV(d);
  (void)cause;
  (void)count;
  (void)addr;
  return NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void* d, int* pending) {
  CHECK_DEV(d);
  (void)pending;
  return NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(void* d, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failure) {
  CHECK_DEV(d);
  const FakeGpu* g = DEV(d);
  *corr = g->remap_corr;
  *unc = g->remap_unc;
  *pending = g->remap_pending;
  *failure = g->remap_failure;
  return OK;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(void* d, int* mode) {
  CHECK_DEV(d);
  *mode = DEV(d)->persistence;
  return OK;
}
#define UINT_GETTER(fn, field)            \
  nvmlReturn_t fn(void* d, unsigned* v) { \
    CHECK_DEV(d);                         \
    *v = DEV(d)->field;                   \
    return OK;                            \
  }
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_gen_max)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_width_max)
UINT_GETTER(nvmlDeviceGetPowerUsage, power_mw)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, power_limit_mw)
nvmlReturn_t nvmlDeviceGetPerformanceState(void* d, int* p) {
  CHECK_DEV(d);
  *p = DEV(d)->pstate;
  return OK;
}
nvmlReturn_t nvmlDeviceGetClockInfo(void* d, int type, unsigned* mhz) {
  CHECK_DEV(d);
  if (type == 1 || type == 0)
    *mhz = DEV(d)->sm;
  else if (type == 2)
    *mhz = DEV(d)->mem_clk;
  else
    return INVALID_ARGUMENT;
  return OK;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(void* d, int type, unsigned* mhz) {
  CHECK_DEV(d);
  if (type == 1 || type == 0)
    *mhz = DEV(d)->sm_max;
  else if (type == 2)
    *mhz = DEV(d)->mem_clk_max;
  else
    return INVALID_ARGUMENT;
  return OK;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void* d, unsigned long long* r) {
  CHECK_DEV(d);
  *r = DEV(d)->throttle;
  return OK;
}
nvmlReturn_t nvmlDeviceGetTemperature(void* d, int sensor, unsigned* t) {
  CHECK_DEV(d);
  if (sensor != 0) return INVALID_ARGUMENT;
  *t = DEV(d)->temp;
  return OK;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(void* d, int kind, unsigned* t) {
  CHECK_DEV(d);
  if (kind == 0)
    *t = DEV(d)->temp_shutdown;
  else if (kind == 1)
    *t = DEV(d)->temp_slowdown;
  else
    return NOT_SUPPORTED;
  return OK;
}
nvmlReturn_t nvmlDeviceGetMigMode(void* d, unsigned* current, unsigned* pending) {
  CHECK_DEV(d);
  *current = *pending = DEV(d)->mig;
  return OK;
}
/* Same socket: NVML_TOPOLOGY_NODE (40); across sockets: NVML_TOPOLOGY_SYSTEM (50). */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void* a, void* b, int* level) {
  CHECK_DEV(a);
  CHECK_DEV(b);
  *level = g_m.socket[(size_t)a - 1] == g_m.socket[(size_t)b - 1] ? 40 : 50;
  return OK;
}
nvmlReturn_t nvmlDeviceGetP2PStatus(void* a, void* b, int caps, int* status) {
  CHECK_DEV(a);
  CHECK_DEV(b);
  if (caps != 2) return NOT_SUPPORTED;
  *status = g_m.nvlink[(size_t)a - 1][(size_t)b - 1] ? 0 : 5;
  return OK;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(void* d, unsigned link, int* active) {
  CHECK_DEV(d);
  if (link >= 18) return INVALID_ARGUMENT;
  *active = (int)link < DEV(d)->nvlinks;
  return OK;
}
