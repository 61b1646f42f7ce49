// The CUDA backend on first use: libmopt_cuda.so (backend/cuda/entry.h) is found and loaded when a CUDA runner
// is first asked for, so that the mopt binary links no CUDA library and starts (and runs on the CPU) where none
// exists. Where the object is looked for, in order:
//   1. in the process already: an executable linked against it (the CUDA tests and benchmarks);
//   2. $MOPT_CUDA_LIB, when set: the object's path;
//   3. libmopt_cuda.so next to the running executable (the directory of /proc/self/exe).
// Whether a GPU is usable (--device auto) is asked of the NVIDIA driver's library first: without it no GPU can be
// used, and the object, whose cuBLAS takes about a second to load, is not loaded to find that out. A build
// without CUDA has no object: every answer is "not built with CUDA".
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/entry.h"
#include "core/log.h"

namespace mopt {
namespace {

struct Backend {
  const CudaBackendApi* api = nullptr;
  Status status;  // why api is null
};

#if MOPT_HAVE_CUDA
constexpr const char* kLibName = "libmopt_cuda.so";
using Entry = const CudaBackendApi* (*)();

// The entry point of an object already in the process (linked into the executable), or null.
Entry linked_entry() { return reinterpret_cast<Entry>(dlsym(RTLD_DEFAULT, kMoptCudaBackendEntry)); }

// The driver library the CUDA runtime loads (kept loaded), or why it cannot be.
Status driver_present() {
  static const Status status = [] {
    if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) return Status::ok();
    const char* e = dlerror();
    return error("no NVIDIA driver (%s)", e ? e : "libcuda.so.1 cannot be loaded");
  }();
  return status;
}

// Where to load the object from, and where that path came from (for errors).
struct LibraryPath {
  std::string path;
  const char* origin;
};
LibraryPath library_path() {
  if (const char* env = std::getenv("MOPT_CUDA_LIB"); env && *env) return {env, "$MOPT_CUDA_LIB"};
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return {kLibName, "the dynamic loader's search path: /proc/self/exe is unreadable"};
  const std::string path(exe, static_cast<size_t>(n));
  return {path.substr(0, path.rfind('/') + 1) + kLibName, "next to the mopt executable"};
}

Backend load() {
  Entry entry = linked_entry();
  std::string where = "(linked into this executable)";
  if (!entry) {
    const LibraryPath lib = library_path();
    where = lib.path;
    if (where.find('/') != std::string::npos && access(where.c_str(), F_OK) != 0)
      return {nullptr, error("the CUDA backend %s (%s) does not exist: install libmopt_cuda.so next to mopt or set "
                             "MOPT_CUDA_LIB to its path, or use --device cpu",
                             where.c_str(), lib.origin)};
    void* handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);  // stays loaded for the life of the process
    if (!handle) {
      const char* e = dlerror();
      return {nullptr, error("cannot load the CUDA backend %s: %s; it needs the CUDA toolkit's cuBLAS libraries "
                             "(their directory in LD_LIBRARY_PATH) and the mopt binary it was built with; or use "
                             "--device cpu",
                             where.c_str(), e ? e : "dlopen failed")};
    }
    entry = reinterpret_cast<Entry>(dlsym(handle, kMoptCudaBackendEntry));
    if (!entry)
      return {nullptr, error("%s is not mopt's CUDA backend (it has no %s)", where.c_str(), kMoptCudaBackendEntry)};
  }
  const CudaBackendApi* api = entry();
  if (!api || !(api->abi == CudaBackendAbi{}))
    return {nullptr, error("the CUDA backend %s comes from another build of mopt (its interface differs): use the "
                           "libmopt_cuda.so built with this mopt",
                           where.c_str())};
  MOPT_LOG_DEBUG("cuda: backend %s", where.c_str());
  return {api, Status::ok()};
}
#endif

const Backend& backend() {
#if MOPT_HAVE_CUDA
  static const Backend b = load();
#else
  static const Backend b{nullptr, error("this mopt was not built with CUDA: rebuild with the CUDA toolkit installed "
                                        "(cmake -DMOPT_CUDA=ON) or use --device cpu")};
#endif
  return b;
}

}  // namespace

Status cuda_backend_usable() {
#if MOPT_HAVE_CUDA
  if (!linked_entry()) MOPT_TRY(driver_present());
#endif
  const Backend& b = backend();
  return b.api ? b.api->probe() : b.status;
}

bool cuda_device_available() { return cuda_backend_usable().is_ok(); }

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                        const CudaRunnerExtras& extras) {
  const Backend& b = backend();
  if (!b.api) return b.status;
  auto r = b.api->create(model, opts, extras);
#if MOPT_HAVE_CUDA
  if (!r) {  // without the driver the runtime's own answer is cryptic ("driver version is insufficient")
    if (const Status driver = driver_present(); !driver) return r.status().with_context(driver.message());
  }
#endif
  return r;
}

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts) {
  return create_cuda_runner(model, opts, CudaRunnerExtras{});
}

}  // namespace mopt
