#include "backend/runner.h"

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/cuda_runner.h"
#include "core/log.h"

namespace mopt {

const char* device_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kAuto: return "auto";
  }
  return "?";
}

Status ModelRunner::forward_sample(const ForwardBatch&, std::span<const RowSampling>, int32_t*) {
  return error("the %s backend cannot sample on the device (can_sample() is false): use forward()",
               device_name(device()));
}

Status ModelRunner::sampled_logits(std::span<const int32_t>, float*) {
  return error("the %s backend cannot sample on the device (can_sample() is false): use forward()",
               device_name(device()));
}

DeviceKind resolve_device(DeviceKind requested) {
  if (requested != DeviceKind::kAuto) return requested;
  return cuda_device_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
}

Result<std::unique_ptr<ModelRunner>> create_runner(const Model& model, const RunnerOptions& requested) {
  RunnerOptions opts = requested;
  opts.device = resolve_device(requested.device);
  if (requested.device == DeviceKind::kAuto)
    MOPT_LOG_INFO("--device auto: using %s (%s)", device_name(opts.device),
                  opts.device == DeviceKind::kCuda ? "a CUDA GPU is available"
                                                   : "no usable CUDA GPU, or a build without CUDA");
  switch (opts.device) {
    case DeviceKind::kCpu: {
      MOPT_ASSIGN_OR_RETURN(auto r, CpuRunner::create(model, opts));
      return std::unique_ptr<ModelRunner>(std::move(r));
    }
    case DeviceKind::kCuda: {
      auto r = create_cuda_runner(model, opts);
      if (!r && requested.device == DeviceKind::kAuto)
        return r.status().with_context("--device auto chose cuda (pass --device cpu to run on the CPU)");
      return r;
    }
    case DeviceKind::kAuto: break;  // resolved above
  }
  return error("unknown device");
}

}  // namespace mopt
