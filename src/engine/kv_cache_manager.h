// KVCacheManager: per-request block tables over a BlockPool, plus prefix caching of full blocks.
//
// A block's hash is SHA-256 over (parent block hash | salt, for the first block | the block's token ids as
// little-endian int32), so equal hashes mean equal whole prefixes. Only blocks whose K/V has been computed are
// registered (after the forward pass), so a cached block never holds half-written data.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"

namespace mopt {

// Hash of a full block of tokens given its parent's hash (nullptr for the first block, which takes the salt).
BlockHash hash_block(const BlockHash* parent, std::span<const int32_t> tokens, const std::string& salt);

class KVCacheManager {
 public:
  KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching);

  int block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int blocks_for_tokens(int64_t n) const { return static_cast<int>((n + block_size_ - 1) / block_size_); }

  struct CachedPrefix {
    std::vector<int32_t> blocks;  // [num_tokens / block_size] cached blocks, in order
    int num_tokens = 0;
  };
  // Longest cached prefix of the request's tokens, in full blocks, leaving at least the last token to compute
  // (its logits are needed) and at most req.prefix_cache_limit tokens. Takes no references. Empty when caching
  // is off.
  CachedPrefix find_cached_prefix(Request& req);

  // Makes room for num_new_tokens more tokens after req.num_computed_tokens (or after `prefix` for a request that
  // holds no blocks yet: the prefix blocks are taken first). Returns false, changing nothing, if they do not fit.
  bool allocate_slots(Request& req, int num_new_tokens, const CachedPrefix* prefix = nullptr);

  // Registers the request's full, computed blocks in the prefix cache (call after the forward pass).
  void cache_computed_blocks(Request& req);

  // Releases the request's blocks past the first blocks_for_tokens(num_tokens) (a speculative rollback).
  void trim(Request& req, int64_t num_tokens);

  // Releases every block of the request (tail first, so its tail is evicted before its shared prefix).
  void free(Request& req);

 private:
  void compute_hashes(Request& req, int num_full_blocks);

  int block_size_;
  BlockPool pool_;
};

}  // namespace mopt
