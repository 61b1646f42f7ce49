// The two output paths of quantize_model() (quantize.cpp validates the options and loads the model first).
#pragma once

#include <functional>
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

// Changes the fp32 values of weights before they are encoded (AWQ's scales and clipping), or encodes linear layers
// itself (GPTQ). The writer calls begin_layer(l) before the first tensor of layer l (begin_layer_of() below), then
// for every tensor it writes (canonical names) takes encoded() bytes where there are some, and otherwise converts
// the fp32 values after apply().
class WeightTransform {
 public:
  virtual ~WeightTransform() = default;
  virtual Status begin_layer(int layer) = 0;
  virtual void apply(const std::string& name, float* x, int64_t rows, int64_t k) = 0;
  // Tensor `name` of the current layer already in the type the writer writes for it: rows of that type in the
  // model's row order (the writer reorders them as it reorders the fp32 rows), written as they are.
  virtual const std::vector<uint8_t>* encoded(const std::string& name) const { return nullptr; }
};
// AWQ's activation-aware scale search and clipping search on calibration text (awq.cpp).
Result<std::unique_ptr<WeightTransform>> make_awq(const Model& m, const QuantizeOptions& o, ThreadPool& pool);
// GPTQ on calibration text (gptq.cpp): encodes the linear layers of the decoder blocks whose type (type_of(name, K),
// the type the writer writes) is a GPTQ format (gptq_grid.h); int8's per-row scales are stored in row_scale_type.
using GptqTypeFn = std::function<DType(const std::string& name, int64_t k)>;
Result<std::unique_ptr<WeightTransform>> make_gptq(const Model& m, const QuantizeOptions& o, ThreadPool& pool,
                                                   GptqTypeFn type_of, DType row_scale_type);

// The writers' call of a transform's begin_layer(): when `canonical` is the first tensor of a layer not begun yet
// (`begun`: the last layer begun, -1 at first), announced on the log as "calibrating layer i/n".
Status begin_layer_of(WeightTransform* t, const std::string& canonical, int n_layer, OutputLog& log, int& begun);

// Checks that `need` bytes fit on the file system of `path` (with a margin), naming both sizes otherwise.
Status check_free_space(const std::string& path, uint64_t need);

}  // namespace mopt::quant
