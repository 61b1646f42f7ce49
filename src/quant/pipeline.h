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
