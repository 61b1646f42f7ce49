#include "backend/communicator.h"

#include <algorithm>
#include <cstring>

namespace mopt {
namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }
  void all_reduce_sum(float* buf, size_t n) override { g_->all_reduce_sum(rank_, buf, n); }
  void all_gather(const float* in, std::span<const size_t> counts, float* out) override {
    g_->all_gather(rank_, in, counts, out);
  }

 private:
  std::shared_ptr<InProcessGroup> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> InProcessGroup::make_group(int n) {
  auto g = std::make_shared<InProcessGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InProcessCommunicator>(g, r));
  return out;
}

InProcessGroup::InProcessGroup(int n) : n_(n), barrier_(n), in_(static_cast<size_t>(n), nullptr) {}

void InProcessGroup::all_reduce_sum(int rank, float* buf, size_t n) {
  if (n_ == 1) return;
  in_[static_cast<size_t>(rank)] = buf;
  if (rank == 0 && sum_.size() < n) sum_.resize(n);  // before the barrier: nobody writes sum_ yet
  barrier_.arrive_and_wait();
  // Rank r sums chunk r of every rank's buffer (reduce-scatter), then every rank copies the whole sum.
  const size_t chunk = (n + n_ - 1) / static_cast<size_t>(n_);
  const size_t b = std::min(n, chunk * rank), e = std::min(n, b + chunk);
  for (size_t i = b; i < e; ++i) {
    float s = in_[0][i];
    for (int q = 1; q < n_; ++q) s += in_[static_cast<size_t>(q)][i];
    sum_[i] = s;
  }
  barrier_.arrive_and_wait();  // the sum is complete; every input has been read
  std::memcpy(buf, sum_.data(), n * sizeof(float));
  barrier_.arrive_and_wait();  // every rank has its copy before sum_ is written again
}

void InProcessGroup::all_gather(int rank, const float* in, std::span<const size_t> counts, float* out) {
  in_[static_cast<size_t>(rank)] = in;
  barrier_.arrive_and_wait();
  size_t at = 0;
  for (int q = 0; q < n_; ++q) {
    std::memcpy(out + at, in_[static_cast<size_t>(q)], counts[static_cast<size_t>(q)] * sizeof(float));
    at += counts[static_cast<size_t>(q)];
  }
  barrier_.arrive_and_wait();  // every input has been read before its owner reuses it
}

}  // namespace mopt
