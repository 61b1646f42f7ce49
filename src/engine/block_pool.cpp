#include "engine/block_pool.h"

#include <algorithm>

#include "core/status.h"
#include "core/strfmt.h"

namespace mopt {

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : enable_caching_(enable_caching), index_(enable_caching && num_blocks > 0 ? num_blocks : 0) {
  MOPT_CHECK(num_blocks > 0, "BlockPool needs at least one block, got %d", num_blocks);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) push_back(i);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

void BlockPool::unlink(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.prev >= 0) blocks_[static_cast<size_t>(b.prev)].next = b.next; else head_ = b.next;
  if (b.next >= 0) blocks_[static_cast<size_t>(b.next)].prev = b.prev; else tail_ = b.prev;
  b.prev = b.next = -1;
  --num_free_;
}

void BlockPool::push_back(int32_t id) {
  Block& b = blocks_[static_cast<size_t>(id)];
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0) blocks_[static_cast<size_t>(tail_)].next = id; else head_ = id;
  tail_ = id;
  ++num_free_;
}

void BlockPool::evict_hash(int32_t id) { index_.erase(id); }

std::optional<std::vector<int32_t>> BlockPool::allocate(int n) {
  MOPT_CHECK(n >= 0, "allocate(%d)", n);
  if (n > num_free_) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    int32_t id = head_;
    unlink(id);
    evict_hash(id);
    blocks_[static_cast<size_t>(id)].ref = 1;
    out.push_back(id);
  }
  return out;
}

void BlockPool::release(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    MOPT_CHECK(id >= 0 && id < num_blocks(), "release of block %d outside [0, %d)", id, num_blocks());
    Block& b = blocks_[static_cast<size_t>(id)];
    MOPT_CHECK(b.ref > 0, "double free of block %d", id);
    if (--b.ref == 0) push_back(id);
  }
}

void BlockPool::acquire(int32_t id) {
  MOPT_CHECK(id >= 0 && id < num_blocks(), "acquire of block %d outside [0, %d)", id, num_blocks());
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.ref == 0) unlink(id);
  ++b.ref;
}

std::optional<int32_t> BlockPool::lookup(const BlockHash& hash) const {
  if (!enable_caching_) return std::nullopt;
  const int32_t id = index_.find(hash);
  if (id < 0) return std::nullopt;
  return id;
}

bool BlockPool::cache(int32_t id, const BlockHash& hash) {
  MOPT_CHECK(id >= 0 && id < num_blocks(), "cache of block %d outside [0, %d)", id, num_blocks());
  if (!enable_caching_) return false;
  MOPT_CHECK(blocks_[static_cast<size_t>(id)].ref > 0, "caching free block %d", id);
  return index_.insert(id, hash);
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int32_t id = head_; id >= 0; id = blocks_[static_cast<size_t>(id)].next) out.push_back(id);
  return out;
}

std::string BlockPool::check_invariants() const {
  const int n = num_blocks();
  std::vector<char> seen(static_cast<size_t>(n), 0);
  int count = 0;
  int32_t prev = -1;
  for (int32_t id = head_; id >= 0; id = blocks_[static_cast<size_t>(id)].next) {
    if (id >= n) return strfmt("free list holds block %d outside [0, %d)", id, n);
    if (seen[static_cast<size_t>(id)]) return strfmt("block %d is in the free list twice", id);
    seen[static_cast<size_t>(id)] = 1;
    const Block& b = blocks_[static_cast<size_t>(id)];
    if (b.ref != 0) return strfmt("block %d is in the free list with ref %d", id, b.ref);
    if (b.prev != prev) return strfmt("block %d has a broken prev link", id);
    prev = id;
    if (++count > n) return "free list has a cycle";
  }
  if (prev != tail_) return "free list tail is wrong";
  if (count != num_free_) return strfmt("free list has %d blocks but num_free is %d", count, num_free_);
  for (int32_t id = 0; id < n; ++id) {
    const Block& b = blocks_[static_cast<size_t>(id)];
    if (b.ref < 0) return strfmt("block %d has negative ref %d", id, b.ref);
    if (b.ref == 0 && !seen[static_cast<size_t>(id)]) return strfmt("block %d has ref 0 but is not free", id);
  }
  if (std::string e = index_.check(); !e.empty()) return "prefix-cache index: " + e;
  return {};
}

}  // namespace mopt
