// `mopt quantize`: reads a model (a Hugging Face folder of f32 / f16 / bf16 safetensors, sharded or not, or a GGUF
// file), converts its weights one tensor at a time and writes a GGUF file or a safetensors folder (targets.h). Peak
// memory beyond the output being written: one tensor in fp32 and its converted bytes (AWQ adds its calibration
// activations of one layer). The output appears only when complete (output.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/targets.h"

namespace mopt::quant {

// kDefault: AWQ for the awq target, round-to-nearest otherwise. kGptq: GPTQ (gptq.h) for int8, q8_0, q4_0, awq.
enum class Method { kDefault, kRtn, kAwq, kGptq };

struct QuantizeOptions {
  std::string input, output;
  Target target = Target::kQ8_0;
  Method method = Method::kDefault;
  std::string calib_path;       // AWQ / GPTQ calibration text; empty: the bundled sample (calib_text.h)
  int calib_tokens = 0;         // GPTQ: calibration tokens used at most; 0: kCalibMaxTokens (2048)
  double damp = 0;              // GPTQ: dampening, a fraction of H's mean diagonal; 0: GptqOptions's default
  bool act_order = false;       // GPTQ: columns by decreasing input energy, group scales from the original weights
  bool force = false;           // replace an existing output
  bool fp8_per_tensor = false;  // fp8: one weight scale per tensor instead of per output channel
  int threads = 0;              // 0: all cores
};

// Where the work stands, after each tensor (and once before the first).
struct Progress {
  std::string stage;       // "calibrating", "quantizing"
  std::string tensor;      // the tensor being written (or the layer being calibrated)
  uint64_t done = 0;       // parameters written so far
  uint64_t total = 0;      // parameters to write
};
using ProgressFn = std::function<void(const Progress&)>;

struct TensorRecord {
  std::string name;  // as written
  std::string type;  // as written: a dtype name ("q6_k") or the layout's ("awq int4 g128")
  uint64_t params;
};

struct QuantizeReport {
  std::vector<TensorRecord> tensors;
  uint64_t params = 0;      // weights written (all tensors)
  uint64_t out_bytes = 0;   // size of the output
  double seconds = 0;
};

Result<QuantizeReport> quantize_model(const QuantizeOptions& o, const ProgressFn& progress = {});

}  // namespace mopt::quant
