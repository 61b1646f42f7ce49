// BlockPool: the KV cache as a fixed pool of blocks, allocated once and never renumbered.
//
// Every block has a reference count (number of requests whose block table holds it). Blocks with ref 0 sit in a
// free list in LRU order: allocation takes from the front (least recently freed), freeing appends to the back.
// A full block may carry a prefix-cache hash; it stays findable while it is free until allocation evicts it.
// Block ids are indices [0, num_blocks); the cache slot of token offset o in block b is b * block_size + o.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/block_hash_index.h"
#include "engine/sha256.h"

namespace mopt {

using BlockHash = Sha256Digest;

class BlockPool {
 public:
  BlockPool(int num_blocks, bool enable_caching);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_free() const { return num_free_; }
  bool caching_enabled() const { return enable_caching_; }
  // Fraction of blocks held by requests (ref > 0).
  double usage() const;

  // Takes n free blocks (ref becomes 1), evicting their cached hashes. nullopt (and no change) if fewer are free.
  std::optional<std::vector<int32_t>> allocate(int n);
  // Drops one reference from each block; blocks reaching 0 go to the back of the free list in the given order
  // (so pass a request's blocks tail-first: its last blocks are then evicted first).
  void release(std::span<const int32_t> ids);
  // Adds a reference to a cached block found by lookup() (taking it off the free list if it was free).
  void acquire(int32_t id);

  // Prefix cache: the block holding `hash`, if any (and caching is on).
  std::optional<int32_t> lookup(const BlockHash& hash) const;
  // Registers full block `id` under `hash`. Returns false (block left uncached) if caching is off, the hash is
  // already held by another block, or the block already has a hash.
  bool cache(int32_t id, const BlockHash& hash);

  int ref_count(int32_t id) const { return blocks_.at(static_cast<size_t>(id)).ref; }
  int num_cached() const { return index_.size(); }
  // Heap bytes of the prefix-cache index: fixed at construction (no allocation per cached block).
  size_t index_bytes() const { return index_.bytes(); }
  // The free list, front (next to allocate) first.
  std::vector<int32_t> free_list() const;

  // Verifies the internal invariants (free list is exactly the ref-0 blocks, each once; hash map consistent;
  // counts match). Returns an empty string when they hold, else a description of the first violation.
  std::string check_invariants() const;

 private:
  struct Block {
    int ref = 0;
    int32_t prev = -1, next = -1;  // free-list links (valid while ref == 0)
  };
  void unlink(int32_t id);
  void push_back(int32_t id);
  void evict_hash(int32_t id);

  bool enable_caching_;
  std::vector<Block> blocks_;  // [num_blocks]
  int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
  BlockHashIndex index_;       // hash <-> block id of the cached blocks; empty when caching is off
};

}  // namespace mopt
