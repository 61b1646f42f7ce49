// Interned sets of NFA states for the subset construction (automaton.cpp, determinize): each distinct set gets
// the next id. Every set's elements live in one arena and the ids in one open-addressing table, so interning
// allocates nothing once both have grown.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace mopt::grammar {

class SubsetTable {
 public:
  // The id of `set` (sorted, without repeats, as the caller keeps them) and whether it was added by this call.
  std::pair<int32_t, bool> intern(std::span<const int32_t> set) {
    if ((size() + 1) * 2 > slots_.size()) grow();
    const uint64_t h = hash(set);
    const size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      const int32_t id = slots_[i];
      if (id < 0) {
        slots_[i] = static_cast<int32_t>(size());
        break;
      }
      if (hashes_[static_cast<size_t>(id)] == h && equal((*this)[id], set)) return {id, false};
    }
    elems_.insert(elems_.end(), set.begin(), set.end());
    off_.push_back(elems_.size());
    hashes_.push_back(h);
    return {static_cast<int32_t>(size() - 1), true};
  }

  std::span<const int32_t> operator[](int32_t id) const {
    const size_t b = off_[static_cast<size_t>(id)], e = off_[static_cast<size_t>(id) + 1];
    return {elems_.data() + b, e - b};
  }
  size_t size() const { return off_.size() - 1; }

  void clear() {  // keeps the arena's memory; the table starts small again (a grammar has many small rules)
    elems_.clear();
    off_.assign(1, 0);
    hashes_.clear();
    slots_.clear();
  }

 private:
  static uint64_t hash(std::span<const int32_t> set) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ set.size();
    for (int32_t x : set) h = (h ^ static_cast<uint32_t>(x)) * 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 29);
  }
  static bool equal(std::span<const int32_t> a, std::span<const int32_t> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(int32_t)) == 0;
  }
  void grow() {  // doubles the table (at least 64 slots) and re-inserts every id
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), -1);
    const size_t mask = slots_.size() - 1;
    for (size_t id = 0; id < size(); ++id) {
      size_t i = static_cast<size_t>(hashes_[id]) & mask;
      while (slots_[i] >= 0) i = (i + 1) & mask;
      slots_[i] = static_cast<int32_t>(id);
    }
  }

  std::vector<int32_t> elems_;     // the sets' elements, one after another
  std::vector<size_t> off_{0};     // [size() + 1] where each set begins in elems_
  std::vector<uint64_t> hashes_;   // [size()]
  std::vector<int32_t> slots_;     // power of two, at most half full; -1 empty, else an id
};

}  // namespace mopt::grammar
