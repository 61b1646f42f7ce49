#include "core/tensor.h"

#include "core/strfmt.h"

namespace mopt {

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += strfmt(i ? ", %lld" : "%lld", static_cast<long long>(ne[i]));
  return s + "]";
}

}  // namespace mopt
