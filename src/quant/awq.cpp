// AWQ search: not written yet.
#include "quant/pipeline.h"

namespace mopt::quant {

Result<std::unique_ptr<WeightTransform>> make_awq(const Model&, const QuantizeOptions&, ThreadPool&) {
  return error("--method awq is not available yet; use --method rtn");
}

}  // namespace mopt::quant
