// The two output paths of quantize_model() (quantize.cpp validates the options and loads the model first).
#pragma once

#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"
#include "quant/quantize.h"

namespace mopt::quant {

// A GGUF file (gguf_output.cpp): metadata copied from a GGUF input or made from the model (gguf_meta.h), the tensor
// types of the target's mix (targets.h).
Result<QuantizeReport> write_gguf(const Model& m, const QuantizeOptions& o, ThreadPool& pool,
                                  const ProgressFn& progress);
// A safetensors folder in the target's layout with its config.json and the tokenizer files (hf_output.cpp).
Result<QuantizeReport> write_hf(const Model& m, const QuantizeOptions& o, ThreadPool& pool, const ProgressFn& progress);

// The progress callbacks and the report of an output path, kept the same way by both: each tensor is announced
// as it is begun and recorded once written; the last callback names no tensor.
class OutputLog {
 public:
  // `params`: the parameters of all tensors to write.
  OutputLog(const ProgressFn& progress, uint64_t params) : progress_(progress), prog_{"quantizing", "", 0, params} {
    rep_.params = params;
  }
  // `tensor` (a tensor's name, or the layer being calibrated) is begun at `stage`.
  void begin(const char* stage, std::string tensor) {
    prog_.stage = stage;
    prog_.tensor = std::move(tensor);
    if (progress_) progress_(prog_);
  }
  // A tensor is written: its name and type as written, and its parameter count.
  void written(std::string name, std::string type, uint64_t params) {
    prog_.done += params;
    rep_.tensors.push_back({std::move(name), std::move(type), params});
  }
  // The output is complete, `out_bytes` long: the last callback, and the report.
  QuantizeReport finish(uint64_t out_bytes) {
    prog_.tensor.clear();
    if (progress_) progress_(prog_);
    rep_.out_bytes = out_bytes;
    return std::move(rep_);
  }

 private:
  const ProgressFn& progress_;
  Progress prog_;
  QuantizeReport rep_;
};

// Changes the fp32 values of weights before they are encoded (AWQ's scales and clipping). The writer calls
// begin_layer(l) before the first tensor of layer l and apply() on every tensor it writes (canonical names).
class WeightTransform {
 public:
  virtual ~WeightTransform() = default;
  virtual Status begin_layer(int layer) = 0;
  virtual void apply(const std::string& name, float* x, int64_t rows, int64_t k) = 0;
};
// AWQ's activation-aware scale search and clipping search on calibration text (awq.cpp).
Result<std::unique_ptr<WeightTransform>> make_awq(const Model& m, const QuantizeOptions& o, ThreadPool& pool);

// Checks that `need` bytes fit on the file system of `path` (with a margin), naming both sizes otherwise.
Status check_free_space(const std::string& path, uint64_t need);

}  // namespace mopt::quant
