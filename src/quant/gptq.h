// GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers", 2022):
// a linear layer's weights quantized one input column at a time, each column's rounding error spread over the
// columns not yet quantized so as to minimize the layer's output error |X W^T - X Q^T|^2 on calibration inputs X.
// The entry point of `mopt quantize --method gptq` is make_gptq() (pipeline.h); this header is the algorithm on one
// matrix, for it and the tests. docs/quantize.md ("GPTQ") describes the choices.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/gptq_grid.h"

namespace mopt::quant {

struct GptqOptions {
  double damp = 1.0;       // added to H's diagonal: this fraction of its mean diagonal (the paper: 1%; docs/quantize.md)
  bool act_order = false;  // columns in order of decreasing H diagonal ("act-order"); the group scales are then set
                           // from the original weights before the first column (static groups)
};

// GPTQ of w [N, K] (row-major fp32) against h [K, K] = X^T X of its calibration inputs X [T, K] (column_gram(); any
// positive multiple gives the same result, so the paper's 2/T factor is left out), onto `grid` ([N, K], its format
// chosen by the caller). Columns are taken in blocks of 128 with the updates of later blocks deferred ("lazy
// batch"); rows are split over the pool. On return w holds the values of the codes chosen: grid.bytes()
// dequantized. An error only when h stays singular with 1000x the dampening.
Status gptq_quantize(float* w, int64_t N, int64_t K, std::vector<float> h, WeightGrid& grid, const GptqOptions& o,
                     ThreadPool& pool);

// Test hook: called by make_gptq()'s transform with each linear layer it quantizes, its canonical name and its
// GPTQ values w [N, K] (the dequantized codes, as gptq_quantize() leaves them). Empty: off.
using GptqObserver = std::function<void(const std::string& name, const float* w, int64_t N, int64_t K)>;
void set_gptq_observer(GptqObserver f);

}  // namespace mopt::quant
