#include "engine/block_hash_index.h"

#include "core/status.h"
#include "core/strfmt.h"

namespace mopt {

BlockHashIndex::BlockHashIndex(int num_blocks) {
  MOPT_CHECK(num_blocks >= 0 && num_blocks <= (1 << 29), "BlockHashIndex of %d blocks", num_blocks);
  if (num_blocks == 0) return;
  hashes_.assign(static_cast<size_t>(num_blocks), Sha256Digest{});
  has_.assign(static_cast<size_t>(num_blocks), 0);
  size_t n = 1;
  while (n < 2 * static_cast<size_t>(num_blocks)) n <<= 1;  // load factor <= 1/2: short probe runs
  slots_.assign(n, -1);
  mask_ = n - 1;
}

size_t BlockHashIndex::home(const Sha256Digest& hash) const {
  size_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | hash[static_cast<size_t>(i)];  // SHA-256 bytes are uniform already
  return v & mask_;
}

int32_t BlockHashIndex::find(const Sha256Digest& hash) const {
  if (slots_.empty()) return -1;
  for (size_t s = home(hash);; s = (s + 1) & mask_) {
    const int32_t id = slots_[s];
    if (id < 0) return -1;
    if (hashes_[static_cast<size_t>(id)] == hash) return id;
  }
}

bool BlockHashIndex::insert(int32_t id, const Sha256Digest& hash) {
  MOPT_CHECK(id >= 0 && id < num_blocks(), "BlockHashIndex::insert of block %d outside [0, %d)", id, num_blocks());
  if (has_[static_cast<size_t>(id)]) return false;
  size_t s = home(hash);
  for (; slots_[s] >= 0; s = (s + 1) & mask_)
    if (hashes_[static_cast<size_t>(slots_[s])] == hash) return false;
  slots_[s] = id;  // an empty slot exists: at most num_blocks of the >= 2 * num_blocks slots are taken
  hashes_[static_cast<size_t>(id)] = hash;
  has_[static_cast<size_t>(id)] = 1;
  ++size_;
  return true;
}

bool BlockHashIndex::erase(int32_t id) {
  if (!contains(id)) return false;
  size_t hole = home(hashes_[static_cast<size_t>(id)]);
  while (slots_[hole] != id) {
    MOPT_CHECK(slots_[hole] >= 0, "BlockHashIndex: block %d is registered but not in its probe run", id);
    hole = (hole + 1) & mask_;
  }
  // Backward shift: an entry after the hole moves into it unless its home lies cyclically in (hole, entry].
  for (size_t s = (hole + 1) & mask_; slots_[s] >= 0; s = (s + 1) & mask_) {
    const size_t h = home(hashes_[static_cast<size_t>(slots_[s])]);
    const bool stays = hole <= s ? (hole < h && h <= s) : (hole < h || h <= s);
    if (stays) continue;
    slots_[hole] = slots_[s];
    hole = s;
  }
  slots_[hole] = -1;
  has_[static_cast<size_t>(id)] = 0;
  --size_;
  return true;
}

const Sha256Digest& BlockHashIndex::hash_of(int32_t id) const {
  MOPT_CHECK(contains(id), "BlockHashIndex: block %d has no hash", id);
  return hashes_[static_cast<size_t>(id)];
}

std::string BlockHashIndex::check() const {
  int in_slots = 0;
  std::vector<uint8_t> seen(has_.size(), 0);
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int32_t id = slots_[s];
    if (id < 0) continue;
    if (id >= num_blocks()) return strfmt("slot %zu holds block %d outside [0, %d)", s, id, num_blocks());
    if (!has_[static_cast<size_t>(id)]) return strfmt("slot %zu holds block %d, which has no hash", s, id);
    if (seen[static_cast<size_t>(id)]++) return strfmt("block %d is in two slots", id);
    ++in_slots;
    for (size_t p = home(hashes_[static_cast<size_t>(id)]); p != s; p = (p + 1) & mask_)
      if (slots_[p] < 0) return strfmt("block %d in slot %zu is past an empty slot of its probe run", id, s);
    if (find(hashes_[static_cast<size_t>(id)]) != id) return strfmt("block %d is not found by its hash", id);
  }
  int registered = 0;
  for (uint8_t h : has_) registered += h;
  if (registered != in_slots || registered != size_)
    return strfmt("%d blocks have a hash, %d slots are taken, size is %d", registered, in_slots, size_);
  return {};
}

}  // namespace mopt
