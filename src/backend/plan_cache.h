// The persistent plan cache: a backend's tuning results (GEMM algorithms and tilings, refined graph plans) kept on
// disk so that a restart with the same key skips tuning (docs/warmup.md). This file knows the format, the key and
// the validation, nothing about GPUs: a backend turns its plans into PlanRecords and back (backend/cuda/gemm.cpp),
// and the tests drive every fault on the CPU machine with a made-up key.
//
// File: <dir>/plans-<16 hex digits of the model fields>.txt, text, one item per line:
//   mopt plan cache 1
//   model <name>=<value>        (the model shape, dtype and engine limits: they name the file)
//   platform <name>=<value>     (GPU, driver, CUDA, cuBLAS, backend build: checked, not in the name)
//   records <count>
//   <kind> <int> ... [<hex blob>]
//   end <FNV-1a 64 of every byte before this line, 16 hex digits>
// A missing file is a miss; anything else that is not exactly that (truncated, garbage, another key, a record of an
// unknown kind or the wrong length, a failed checksum) is rejected whole with the reason: the caller warns and
// tunes, never uses part of a file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mopt {

struct PlanCacheField {
  std::string name, value;
  bool operator==(const PlanCacheField&) const = default;
};

struct PlanCacheKey {
  std::vector<PlanCacheField> model;     // model shape, compute dtype, engine limits: name the file
  std::vector<PlanCacheField> platform;  // GPU model, driver, CUDA runtime, cuBLAS, backend build
  // "plans-<hex>.txt": the same model and limits map to one file whatever the platform, so a driver update finds
  // the old file and says what changed.
  std::string file_name() const;
};

// One cached plan: a kind, integers and an opaque blob (e.g. a cuBLASLt algorithm, which cuBLASLt documents as
// serializable for the same library version).
struct PlanRecord {
  std::string kind;
  std::vector<int64_t> ints;
  std::vector<uint8_t> blob;
  bool operator==(const PlanRecord&) const = default;
};

// The shape every record of `kind` must have; a file with any other record is rejected.
struct PlanRecordSchema {
  std::string kind;
  int n_ints = 0;
  int blob_bytes = 0;
};

struct PlanCacheLoad {
  enum class Outcome { kHit, kMissing, kRejected };
  Outcome outcome = Outcome::kMissing;
  std::vector<PlanRecord> records;  // kHit only
  std::string reason;               // kRejected: what was wrong (for the warning)
};

// $XDG_CACHE_HOME/mopt, else $HOME/.cache/mopt; "" when neither variable is set.
std::string default_plan_cache_dir();

// Reads `path` and checks it against `key` and `schema`. Never throws or crashes on any content.
PlanCacheLoad load_plan_cache(const std::string& path, const PlanCacheKey& key,
                              std::span<const PlanRecordSchema> schema);

// The same checks on a file's bytes already read (load_plan_cache's second half; the fuzz target's entry).
PlanCacheLoad parse_plan_cache(std::string_view text, const PlanCacheKey& key,
                               std::span<const PlanRecordSchema> schema);

// `body` (every line before the end line) followed by its end line: what save_plan_cache writes.
std::string sign_plan_cache(std::string_view body);

// Writes the file atomically (a temporary file renamed over `path`), creating its directory. An error says what
// failed (an unwritable directory, a full disk); nothing partial is left behind.
Status save_plan_cache(const std::string& path, const PlanCacheKey& key, std::span<const PlanRecord> records);

}  // namespace mopt
