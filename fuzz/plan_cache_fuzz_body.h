// Body of the plan-cache fuzz target (fuzz/plan_cache_fuzz.cpp), shared with the unit test that replays mutated
// files under the regular (ASan/UBSan) build (tests/unit/backend/plan_cache_test.cpp). The bytes are parsed twice:
// as they are (the end line and its checksum), and re-signed with a valid end line so that mutations reach the key,
// record and blob parsing behind the checksum. A file accepted must hold only records of the schema's shape;
// anything else aborts (a finding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "backend/plan_cache.h"

namespace mopt::fuzz {

// The key and schema of the seeds (fuzz/corpus/plan_cache, PlanCacheFuzz in the unit tests).
inline PlanCacheKey plan_cache_fuzz_key() {
  PlanCacheKey k;
  k.model = {{"arch", "llama"}, {"n_embd", "4096"}, {"dtype", "bf16"}};
  k.platform = {{"gpu", "Fake GPU 9000"}, {"driver", "12080"}};
  return k;
}
inline const std::vector<PlanRecordSchema>& plan_cache_fuzz_schema() {
  static const std::vector<PlanRecordSchema> schema = {{"gemm", 4, 8}, {"fused", 3, 0}, {"graph", 1, 0}};
  return schema;
}

inline int plan_cache_body(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const PlanCacheKey key = plan_cache_fuzz_key();
  const std::vector<PlanRecordSchema>& schema = plan_cache_fuzz_schema();
  // Every line but the last (a seed's end line), re-signed.
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  const size_t cut = body.rfind('\n');
  body = cut == std::string_view::npos ? std::string_view() : text.substr(0, cut + 1);
  for (const PlanCacheLoad& got :
       {parse_plan_cache(text, key, schema), parse_plan_cache(sign_plan_cache(body), key, schema)}) {
    if (got.outcome == PlanCacheLoad::Outcome::kRejected && got.reason.empty()) std::abort();
    if (got.outcome != PlanCacheLoad::Outcome::kHit && !got.records.empty()) std::abort();
    for (const PlanRecord& r : got.records) {
      const PlanRecordSchema* sc = nullptr;
      for (const PlanRecordSchema& s : schema)
        if (s.kind == r.kind) sc = &s;
      if (!sc || r.ints.size() != static_cast<size_t>(sc->n_ints) ||
          r.blob.size() != static_cast<size_t>(sc->blob_bytes))
        std::abort();
    }
  }
  return 0;
}

}  // namespace mopt::fuzz
