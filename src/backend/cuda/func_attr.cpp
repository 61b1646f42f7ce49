#include "backend/cuda/func_attr.h"

#include <algorithm>
#include <mutex>
#include <tuple>
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

}  // namespace mopt::cuda
