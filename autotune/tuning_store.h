// Tuning records of this process, in front of the disk cache's.
#ifndef TORCHFUSE_AUTOTUNE_TUNING_STORE_H_
#define TORCHFUSE_AUTOTUNE_TUNING_STORE_H_

#include <optional>

#include "cache/disk_cache.h"
#include "cache/tuning_record.h"

namespace torchfuse::autotune {

/// The record under `key`: from this process's table, else from `disk` (may be null).
std::optional<cache::TuningRecord> LookupRecord(const cache::TuningKey& key,
                                                const cache::DiskCache* disk);

/// A tuned record under `key` on `disk` (another process's tuning), kept in this process's
/// table when found; nullopt when there is none or it is the heuristic's.
std::optional<cache::TuningRecord> LookupTunedRecordOnDisk(const cache::TuningKey& key,
                                                           const cache::DiskCache* disk);

/// Keeps `record` in this process's table and writes it to `disk` (may be null); a failed
/// write is reported once, not an error: the record still serves this process.
void SaveRecord(const cache::TuningRecord& record, const cache::DiskCache* disk);

/// Forgets this process's records (tests and the bench use it to act as a fresh process).
void ResetProcessTuningRecords();

}  // namespace torchfuse::autotune

#endif  // TORCHFUSE_AUTOTUNE_TUNING_STORE_H_
