#include "backend/runner.h"

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/cuda_runner.h"

namespace mopt {

const char* device_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

Result<std::unique_ptr<ModelRunner>> create_runner(const Model& model, const RunnerOptions& opts) {
  switch (opts.device) {
    case DeviceKind::kCpu: {
      MOPT_ASSIGN_OR_RETURN(auto r, CpuRunner::create(model, opts));
      return std::unique_ptr<ModelRunner>(std::move(r));
    }
    case DeviceKind::kCuda:
      return create_cuda_runner(model, opts);
  }
  return error("unknown device");
}

}  // namespace mopt
