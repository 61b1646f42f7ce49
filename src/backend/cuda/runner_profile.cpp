// CudaRunner's profile_step (runner_impl.h): one eager step with a CUDA event after every kernel class (mark()
// calls in runner_forward.cpp), and the GPU time per class summed over layers.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {

Status CudaRunner::mark(const char* what) {
  if (!profiling_) return Status::ok();
  if (prof_marks_.size() == prof_events_.size()) {
    cudaEvent_t e = nullptr;
    MOPT_CUDA_TRY(cudaEventCreate(&e));
    prof_events_.push_back(e);
  }
  cudaEvent_t e = prof_events_[prof_marks_.size()];
  MOPT_CUDA_TRY(cudaEventRecord(e, stream_));
  prof_marks_.emplace_back(what, e);
  return Status::ok();
}

Result<StepProfile> CudaRunner::profile_step(const ForwardBatch& batch) {
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  profiling_ = true;
  prof_marks_.clear();
  Status st = mark("start");
  int rows = 0;
  if (st) st = run_step(batch, &rows);
  profiling_ = false;
  MOPT_TRY(st);
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  if (prof_marks_.size() < 2) return error("profile_step: the step recorded no kernel marks");
  StepProfile prof;
  for (size_t i = 1; i < prof_marks_.size(); ++i) {
    float ms = 0.f;
    MOPT_CUDA_TRY(cudaEventElapsedTime(&ms, prof_marks_[i - 1].second, prof_marks_[i].second));
    const char* name = prof_marks_[i].first;
    auto it = std::find_if(prof.classes.begin(), prof.classes.end(),
                           [&](const StepProfile::Class& c) { return c.name == name; });
    if (it == prof.classes.end()) it = prof.classes.insert(prof.classes.end(), StepProfile::Class{name, 0.0, 0});
    it->us += 1e3 * ms;
    it->launches += 1;
    prof.total_us += 1e3 * ms;
  }
  return prof;
}

}  // namespace mopt::cuda
