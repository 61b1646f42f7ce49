// shard_model(): the tensors one tensor-parallel rank holds (backend/shard_plan.h), as a Model of its own that a
// runner loads like any other (docs/tensor_parallel.md).
//
// Column-parallel matrices (Q, K, V, gate, up; their biases) and the vocab-parallel embedding and classifier are
// sliced by output rows: views into the source model when the rows are contiguous, copies when K/V heads are
// gathered or replicated. Row-parallel matrices (attention output, down) are sliced by input columns: copies,
// whose column range must fall on the weight format's block boundaries (32 or 256 elements), else refused.
// Norms pass through. The shard's views point into `src`, which must outlive it.
#pragma once

#include <memory>

#include "backend/shard_plan.h"
#include "core/status.h"
#include "model/model.h"

namespace mopt {

// The MLP split unit for plan_shards(): the largest block size of the down projections' formats (1 for fp32).
int shard_ff_unit(const Model& src);

Result<std::unique_ptr<Model>> shard_model(const Model& src, const ShardPlan& plan, int rank);

}  // namespace mopt
