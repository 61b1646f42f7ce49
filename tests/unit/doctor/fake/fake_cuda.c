/* A fake libcuda for the doctor tests: cuInit / cuDriverGetVersion / cuDeviceGetCount answer from the machine in
 * fake_machine.h that $MOPT_FAKE_GPU names (cuda.h signatures). */
#include <stdio.h>

#include "fake_machine.h"

static FakeMachine g_m;
static int g_init = 0;

int cuInit(unsigned flags) {
  (void)flags;
  g_m = fake_machine();
  if (g_m.cu_init_ret) return g_m.cu_init_ret;
  g_init = 1;
  return 0;
}
int cuDriverGetVersion(int* v) {
  FakeMachine m = fake_machine();
  *v = m.cuda_version;
  return 0;
}
int cuDeviceGetCount(int* n) {
  if (!g_init) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
  *n = g_m.n_gpus;
  return 0;
}
int cuDeviceGet(int* dev, int ordinal) {
  if (!g_init) return 3;
  if (ordinal < 0 || ordinal >= g_m.n_gpus) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}
int cuDeviceGetName(char* name, int len, int dev) {
  if (!g_init) return 3;
  snprintf(name, (size_t)len, "%s", g_m.gpu[dev].name);
  return 0;
}
int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (!g_init) return 3;
  if (attr == 75)
    *v = g_m.gpu[dev].cc_major;
  else if (attr == 76)
    *v = g_m.gpu[dev].cc_minor;
  else
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  return 0;
}
int cuDeviceGetPCIBusId(char* id, int len, int dev) {
  if (!g_init) return 3;
  snprintf(id, (size_t)len, "0000:%02X:00.0", g_m.gpu[dev].bus);
  return 0;
}
int cuGetErrorName(int r, const char** s) {
  switch (r) {
    case 0:
      *s = "CUDA_SUCCESS";
      return 0;
    case 3:
      *s = "CUDA_ERROR_NOT_INITIALIZED";
      return 0;
    case 100:
      *s = "CUDA_ERROR_NO_DEVICE";
      return 0;
    case 803:
      *s = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
      return 0;
    default:
      *s = NULL;
      return 1;
  }
}
