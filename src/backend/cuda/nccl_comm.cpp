#include "backend/cuda/nccl_comm.h"

#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#include <vector>

namespace mopt::cuda {
namespace {

// The NCCL entry points mopt calls, resolved from libnccl.so.2 once.
struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string load_error;  // empty when loaded
};

const NcclApi& nccl_api() {
  static NcclApi api = [] {
    NcclApi a;
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      a.load_error = std::string("cannot load NCCL (libnccl.so.2: ") + (e ? e : "not found") +
                     "): install NCCL or add its folder (e.g. /usr/local/cuda/lib64) to LD_LIBRARY_PATH";
      return a;
    }
    a.comm_init_all = reinterpret_cast<decltype(a.comm_init_all)>(dlsym(h, "ncclCommInitAll"));
    a.comm_destroy = reinterpret_cast<decltype(a.comm_destroy)>(dlsym(h, "ncclCommDestroy"));
    a.all_reduce = reinterpret_cast<decltype(a.all_reduce)>(dlsym(h, "ncclAllReduce"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(dlsym(h, "ncclGetErrorString"));
    if (!a.comm_init_all || !a.comm_destroy || !a.all_reduce || !a.error_string)
      a.load_error = "libnccl.so.2 lacks ncclCommInitAll / ncclAllReduce: NCCL 2 is needed";
    return a;
  }();
  return api;
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return error("NCCL %s: %s", what, nccl_api().error_string(r));
}

}  // namespace

Result<std::vector<std::unique_ptr<NcclComm>>> NcclComm::create_group(std::span<const int> devices) {
  const NcclApi& api = nccl_api();
  if (!api.load_error.empty()) return error("%s", api.load_error.c_str());
  if (devices.empty()) return error("internal: an NCCL group of no devices");
  std::vector<ncclComm_t> comms(devices.size());
  MOPT_TRY(nccl_status(api.comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
                       "ncclCommInitAll"));
  std::vector<std::unique_ptr<NcclComm>> out;
  for (size_t i = 0; i < comms.size(); ++i) {
    out.push_back(std::unique_ptr<NcclComm>(new NcclComm()));
    out.back()->comm_ = comms[i];
    out.back()->rank_ = static_cast<int>(i);
    out.back()->size_ = static_cast<int>(comms.size());
  }
  return out;
}

NcclComm::~NcclComm() {
  if (comm_) nccl_api().comm_destroy(static_cast<ncclComm_t>(comm_));
}

Status NcclComm::all_reduce_sum(void* buf, size_t count, bool f32, cudaStream_t stream) {
  return nccl_status(nccl_api().all_reduce(buf, buf, count, f32 ? ncclFloat32 : ncclBfloat16, ncclSum,
                                           static_cast<ncclComm_t>(comm_), stream),
                     "all-reduce");
}

}  // namespace mopt::cuda
