#include "backend/cuda/func_attr.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace mopt::cuda {

cudaError_t set_func_attr_once(const void* kernel, cudaFuncAttribute attr, int value) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  using Key = std::tuple<int, const void*, int>;
  static std::mutex mu;
  static std::vector<Key> done;  // a few dozen kernels a device at most
  const Key key{device, kernel, static_cast<int>(attr)};
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(done.begin(), done.end(), key) != done.end()) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, attr, value);
  if (e == cudaSuccess) done.push_back(key);
  return e;
}

cudaError_t resident_ctas(const void* kernel, int threads, size_t dyn_smem, int carveout_percent, int* ctas) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  using Key = std::tuple<int, const void*, size_t, int>;
  static std::mutex mu;
  static std::vector<std::pair<Key, int>> known;
  const Key key{device, kernel, dyn_smem, carveout_percent};
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, v] : known)
    if (k == key) {
      *ctas = v;
      return cudaSuccess;
    }
  int sms = 0, smem_sm = 0, reserved = 0, per_sm = 0;
  cudaFuncAttributes fa{};
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, kernel);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dyn_smem);
  if (e != cudaSuccess) return e;
  // Hopper's shared-memory sizes per SM (KiB); the configuration is the first >= the preferred share.
  const int want = static_cast<int>((static_cast<int64_t>(smem_sm) * carveout_percent + 99) / 100);
  int config = smem_sm;
  for (const int kib : {0, 8, 16, 32, 64, 100, 132, 164, 196, 228})
    if (kib * 1024 >= want) {
      config = std::min(smem_sm, kib * 1024);
      break;
    }
  const int64_t per_cta = static_cast<int64_t>(fa.sharedSizeBytes) + static_cast<int64_t>(dyn_smem) + reserved;
  if (per_cta > 0) per_sm = std::min<int64_t>(per_sm, config / per_cta);
  *ctas = std::max(1, per_sm) * sms;
  known.emplace_back(key, *ctas);
  return cudaSuccess;
}

}  // namespace mopt::cuda
