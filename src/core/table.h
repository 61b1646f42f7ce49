// Lookups in the constant tables of rows that describe the values of an enum (model/arch.cpp's architectures,
// quant/targets.cpp's quantization targets): one row per value, found by its key field or by another field.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>

#include "core/status.h"

namespace mopt {

// The row of `table` whose field `key` is `k`. Every value has its row, so a missing one is an internal error.
template <class Row, size_t N, class K>
const Row& table_row(const Row (&table)[N], K Row::*key, K k) {
  const Row* r = std::ranges::find(table, k, key);
  MOPT_CHECK(r != table + N, "value %d missing from its table", static_cast<int>(k));
  return *r;
}

// The key of the first row of `table` whose `field` equals `v`; nullopt when no row's does.
template <class Row, size_t N, class K, class F, class V>
std::optional<K> table_key(const Row (&table)[N], K Row::*key, F Row::*field, const V& v) {
  const Row* r = std::ranges::find(table, v, field);
  if (r == table + N) return std::nullopt;
  return r->*key;
}

}  // namespace mopt
