#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/status.h"

namespace mopt {

BlockHash hash_block(const BlockHash* parent, std::span<const int32_t> tokens, const std::string& salt) {
  Sha256 h;
  if (parent) {
    h.update("P", 1);
    h.update(parent->data(), parent->size());
  } else {
    // Length-prefixed so that salt bytes can never be confused with token bytes.
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(salt.size()) >> (8 * i));
    h.update("S", 1);
    h.update(len, 8);
    h.update(salt);
  }
  for (int32_t t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    const uint8_t b[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8), static_cast<uint8_t>(u >> 16),
                          static_cast<uint8_t>(u >> 24)};
    h.update(b, 4);
  }
  return h.finish();
}

KVCacheManager::KVCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), pool_(num_blocks, enable_prefix_caching) {
  MOPT_CHECK(block_size > 0, "block_size %d", block_size);
}

void KVCacheManager::compute_hashes(Request& req, int num_full_blocks) {
  MOPT_CHECK(static_cast<int64_t>(num_full_blocks) * block_size_ <= req.num_tokens(), "hashing past the tokens");
  const std::span<const int32_t> toks(req.tokens);
  while (static_cast<int>(req.block_hashes.size()) < num_full_blocks) {
    const size_t i = req.block_hashes.size();
    const BlockHash* parent = i == 0 ? nullptr : &req.block_hashes[i - 1];
    req.block_hashes.push_back(
        hash_block(parent, toks.subspan(i * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_)),
                   req.cache_salt));
  }
}

KVCacheManager::CachedPrefix KVCacheManager::find_cached_prefix(Request& req) {
  CachedPrefix out;
  if (!pool_.caching_enabled() || req.num_tokens() < 1) return out;
  const int max_blocks = std::min(req.num_tokens() - 1, req.prefix_cache_limit) / block_size_;
  compute_hashes(req, max_blocks);
  for (int i = 0; i < max_blocks; ++i) {
    auto id = pool_.lookup(req.block_hashes[static_cast<size_t>(i)]);
    if (!id) break;
    out.blocks.push_back(*id);
  }
  out.num_tokens = static_cast<int>(out.blocks.size()) * block_size_;
  return out;
}

bool KVCacheManager::allocate_slots(Request& req, int num_new_tokens, const CachedPrefix* prefix) {
  MOPT_CHECK(num_new_tokens > 0, "allocate_slots(%d)", num_new_tokens);
  int64_t start = req.num_computed_tokens;
  int num_prefix_free = 0;  // prefix blocks now on the free list: acquiring them shrinks it
  if (prefix && !prefix->blocks.empty()) {
    MOPT_CHECK(req.block_table.empty() && req.num_computed_tokens == 0, "prefix for a request holding blocks");
    start = prefix->num_tokens;
    for (int32_t id : prefix->blocks)
      if (pool_.ref_count(id) == 0) ++num_prefix_free;
  }
  const int have = prefix && !prefix->blocks.empty() ? static_cast<int>(prefix->blocks.size())
                                                      : static_cast<int>(req.block_table.size());
  const int need = std::max(0, blocks_for_tokens(start + num_new_tokens) - have);
  if (need + num_prefix_free > pool_.num_free()) return false;
  if (prefix && !prefix->blocks.empty()) {
    for (int32_t id : prefix->blocks) {
      pool_.acquire(id);
      req.block_table.push_back(id);
    }
    req.num_cached_blocks = static_cast<int>(prefix->blocks.size());
  }
  auto fresh = pool_.allocate(need);
  MOPT_CHECK(fresh.has_value(), "allocation of %d blocks failed after the free-count check", need);
  req.block_table.insert(req.block_table.end(), fresh->begin(), fresh->end());
  return true;
}

void KVCacheManager::cache_computed_blocks(Request& req) {
  if (!pool_.caching_enabled()) return;
  const int full = std::min(req.num_computed_tokens / block_size_, static_cast<int>(req.block_table.size()));
  if (full <= req.num_cached_blocks) return;
  compute_hashes(req, full);
  for (int i = req.num_cached_blocks; i < full; ++i)
    pool_.cache(req.block_table[static_cast<size_t>(i)], req.block_hashes[static_cast<size_t>(i)]);
  req.num_cached_blocks = full;
}

void KVCacheManager::trim(Request& req, int64_t num_tokens) {
  const size_t keep = static_cast<size_t>(blocks_for_tokens(num_tokens));
  if (req.block_table.size() <= keep) return;
  MOPT_CHECK(static_cast<int>(keep) >= req.num_cached_blocks, "trimming blocks offered to the prefix cache");
  std::vector<int32_t> rev(req.block_table.rbegin(), req.block_table.rend() - static_cast<std::ptrdiff_t>(keep));
  pool_.release(rev);
  req.block_table.resize(keep);
}

void KVCacheManager::free(Request& req) {
  std::vector<int32_t> rev(req.block_table.rbegin(), req.block_table.rend());
  pool_.release(rev);
  req.block_table.clear();
  req.num_cached_blocks = 0;
}

}  // namespace mopt
