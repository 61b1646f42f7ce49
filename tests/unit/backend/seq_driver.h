// Test helper: drives a ModelRunner as one or more plain sequences with a paged KV cache whose block
// tables are shuffled (so a test also proves that the runner follows the tables, not contiguity).
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "backend/runner.h"

namespace mopt::test {

class SeqDriver {
 public:
  // n_blocks blocks of block_size; blocks are handed out in a random order (seeded).
  SeqDriver(ModelRunner& r, int n_blocks, int block_size, uint32_t seed = 1) : r_(r), bs_(block_size) {
    free_.resize(static_cast<size_t>(n_blocks));
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
  int add_sequence() {
    seqs_.push_back({});
    return static_cast<int>(seqs_.size()) - 1;
  }
  // Appends `toks` to sequence s in one forward call; returns logits [toks.size(), n_vocab] (all positions).
  std::vector<float> feed(int s, const std::vector<int32_t>& toks) {
    Seq& q = seqs_[static_cast<size_t>(s)];
    const int n = static_cast<int>(toks.size());
    BatchArrays a;
    a.tokens = toks;
    for (int i = 0; i < n; ++i) {
      const int p = q.len + i;
      if (p / bs_ >= static_cast<int>(q.blocks.size())) {
        q.blocks.push_back(free_.back());
        free_.pop_back();
      }
      a.positions.push_back(p);
      a.slot_mapping.push_back(q.blocks[p / bs_] * bs_ + p % bs_);
      a.logits_indices.push_back(i);
    }
    a.query_start.push_back(n);
    a.seq_lens.push_back(q.len + n);
    a.block_tables = q.blocks;
    a.max_blocks_per_seq = static_cast<int>(q.blocks.size());
    const ForwardBatch b = a.view();
    std::vector<float> logits(static_cast<size_t>(n) * r_.config().n_vocab);
    last_status_ = r_.forward(b, logits.data());
    q.len += n;
    return logits;
  }
  Status last_status() const { return last_status_; }

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int len = 0;
  };
  ModelRunner& r_;
  int bs_;
  std::vector<int32_t> free_;
  std::vector<Seq> seqs_;
  Status last_status_;
};

inline int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

}  // namespace mopt::test
