// BlockHashIndex: the prefix cache's index between full blocks and their hashes, allocated once.
//
// Block ids are [0, num_blocks) and each block holds at most one hash, so the index has a fixed bound. It keeps the
// hash of each block ([num_blocks]) and an open-addressing table from hash to block id (linear probing, deletion by
// backward shift, no tombstones) of at least twice as many slots as blocks. Both are sized and written at
// construction: inserting, finding and erasing never allocate. (A node-per-entry map allocates on every insert until
// the pool first wraps around, which a server's resident memory shows as growth for as long as the pool takes to
// fill: docs/gate.md, the leak gate.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sha256.h"

namespace mopt {

class BlockHashIndex {
 public:
  // An index of blocks [0, num_blocks); num_blocks 0 gives an index that holds nothing (caching off).
  explicit BlockHashIndex(int num_blocks);

  // The block registered under `hash`, or -1.
  int32_t find(const Sha256Digest& hash) const;
  // Registers block `id` under `hash`. False (nothing changes) when the block already has a hash or another block
  // holds this hash.
  bool insert(int32_t id, const Sha256Digest& hash);
  // Removes block `id`'s hash; false when it has none.
  bool erase(int32_t id);
  bool contains(int32_t id) const { return id >= 0 && id < num_blocks() && has_[static_cast<size_t>(id)]; }
  // Block `id`'s hash (it must have one).
  const Sha256Digest& hash_of(int32_t id) const;

  int num_blocks() const { return static_cast<int>(has_.size()); }
  int size() const { return size_; }
  size_t num_slots() const { return slots_.size(); }
  // Heap bytes of the index: fixed at construction.
  size_t bytes() const {
    return slots_.capacity() * sizeof(int32_t) + hashes_.capacity() * sizeof(Sha256Digest) + has_.capacity();
  }

  // Every registered block is findable from its hash's home slot without crossing an empty slot, every slot holds a
  // registered block, and the count matches. "" when that holds, else the first violation.
  std::string check() const;

 private:
  size_t home(const Sha256Digest& hash) const;

  std::vector<Sha256Digest> hashes_;  // [num_blocks]: the block's hash while has_[id]
  std::vector<uint8_t> has_;          // [num_blocks]
  std::vector<int32_t> slots_;        // [power of two >= 2 * num_blocks, or 0]: a block id, or -1 (empty)
  size_t mask_ = 0;
  int size_ = 0;
};

}  // namespace mopt
