// A ForwardBatch built by the GPU benchmarks: sequences in fixed cache regions (sequence `seq` owns blocks
// [seq * max_blocks, + max_blocks)), synthetic tokens, the last token of each sequence's rows as its logits row.
#pragma once

#include <cstdint>

#include "backend/runner.h"

namespace mopt::bench {

struct SlotBatch : BatchArrays {
  int max_blocks = 0, bs = 0;
  int token_mod = 32000;  // tokens are below this (the vocabulary, or a part of it)
  // n tokens of sequence `seq` at positions [start, start + n), the first `first_token`; logits of the last row,
  // or of every row.
  void add(int seq, int start, int n, int first_token, bool every_row = false) {
    max_blocks_per_seq = max_blocks;
    for (int i = 0; i < n; ++i) {
      const int pos = start + i;
      tokens.push_back((first_token + i * 7919) % token_mod);
      positions.push_back(pos);
      slot_mapping.push_back((seq * max_blocks + pos / bs) * bs + pos % bs);
      if (every_row && i + 1 < n) logits_indices.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    logits_indices.push_back(static_cast<int32_t>(tokens.size()) - 1);
    query_start.push_back(static_cast<int32_t>(tokens.size()));
    seq_lens.push_back(start + n);
    for (int j = 0; j < max_blocks; ++j) block_tables.push_back(seq * max_blocks + j);
  }
};

}  // namespace mopt::bench
