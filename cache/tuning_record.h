// Tuning records: which variant of a kernel spec runs fastest for a shape bucket on a GPU.
#ifndef TORCHFUSE_CACHE_TUNING_RECORD_H_
#define TORCHFUSE_CACHE_TUNING_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/disk_cache.h"
#include "nlohmann/json.hpp"

namespace torchfuse::cache {

/// What a tuning decision is keyed by.
struct TuningKey {
  std::string spec_hash;  // SHA-256 of the kernel spec (shape-free: outer extents left out)
  std::string bucket;     // shape bucket, e.g. "rows<=4096"
  std::string gpu;        // device name; "" when recorded without a GPU
  int arch = 0;           // e.g. 90
  int driver = 0;         // driver version; 0 without a GPU
  /// The record's file name: SHA-256 of all fields.
  std::string Hash() const;
  bool operator==(const TuningKey& o) const {
    return spec_hash == o.spec_hash && bucket == o.bucket && gpu == o.gpu && arch == o.arch &&
           driver == o.driver;
  }
};

/// A decision, with what is needed to make it again without the model.
struct TuningRecord {
  TuningKey key;
  std::string kernel;    // kernel name (for listings)
  std::string kind;      // "row", "column", "elementwise", or "attention" (RecordChoice)
  std::string variant;   // the chosen variant's signature
  double ms = -1;        // its median time; < 0 when not timed
  bool tuned = false;    // false: the heuristic's choice, recorded as such
  int64_t created_unix = 0;
  std::string trials;    // every candidate's outcome, "variant=ms" or "variant=why", ';'-joined
  std::string phases;    // where tuning time went ("compile=..ms check=..ms timing=..ms")
  std::string spec;      // the kernel spec: input layouts and the fusion group body (IR text)
};

/// The record as a JSON document ({"format": "torchfuse-tuning", "version", "key", "kernel",
/// "variant", "ms", "tuned", "trials": [{"variant", "ms" or "error"}], "spec", ...}): what a
/// cache entry holds and what `cache ls --json` and `inspect --json` print.
nlohmann::json TuningRecordToJson(const TuningRecord& record);
/// DataLoss when the document is not a record of this format version, or is malformed.
absl::StatusOr<TuningRecord> TuningRecordFromJson(absl::string_view text);

/// A cache entry whose payload is the record's JSON document.
Entry ToEntry(const TuningRecord& record);
absl::StatusOr<TuningRecord> TuningRecordFromEntry(const Entry& entry);

}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_TUNING_RECORD_H_
