// Communicator: the collectives a tensor-parallel shard calls inside its forward pass (docs/tensor_parallel.md).
// Every rank of a group calls the same collectives in the same order with the same sizes; a call returns once
// every rank has made it. InProcessGroup implements them for ranks that are threads of one process (the CPU
// backend's shards); a NCCL communicator would implement the same interface for GPUs.
#pragma once

#include <barrier>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace mopt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf [n] := the element-wise sum of every rank's buf [n], summed in rank order (0 + 1 + ...), so every rank
  // gets the same bits.
  virtual void all_reduce_sum(float* buf, size_t n) = 0;
  // out [sum of counts] := every rank's `in` [counts[rank]] concatenated in rank order; counts [size()] is the
  // same on every rank.
  virtual void all_gather(const float* in, std::span<const size_t> counts, float* out) = 0;
};

// The ranks of one process: make_group(n) returns n communicators sharing one group state; rank i must be used
// by exactly one thread at a time, and all n must take part in every collective (a rank that stops calling
// leaves the others waiting: callers check their inputs before the first collective).
class InProcessGroup {
 public:
  static std::vector<std::unique_ptr<Communicator>> make_group(int n);

  explicit InProcessGroup(int n);
  int size() const { return n_; }
  void all_reduce_sum(int rank, float* buf, size_t n);
  void all_gather(int rank, const float* in, std::span<const size_t> counts, float* out);

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<const float*> in_;  // [n_] each rank's published input
  std::vector<float> sum_;        // the all-reduce's result, each rank writing its chunk
};

}  // namespace mopt
