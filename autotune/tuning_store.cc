#include "autotune/tuning_store.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace torchfuse::autotune {
namespace {

struct Store {
  std::mutex mu;
  std::map<std::string, cache::TuningRecord> records;  // by TuningKey::Hash()
};

Store& TheStore() {
  static Store* s = new Store;
  return *s;
}

}  // namespace

std::optional<cache::TuningRecord> LookupRecord(const cache::TuningKey& key,
                                                const cache::DiskCache* disk) {
  const std::string hash = key.Hash();
  Store& s = TheStore();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.records.find(hash);
    if (it != s.records.end()) return it->second;
  }
  if (disk == nullptr) return std::nullopt;
  std::optional<cache::Entry> entry = disk->Read(cache::EntryKind::kTuning, hash);
  if (!entry) return std::nullopt;
  auto record = cache::TuningRecordFromEntry(*entry);
  if (!record.ok() || !(record->key == key)) {
    log::WarningOnce(absl::StrCat("ignoring tuning record ",
                                   disk->PathOf(cache::EntryKind::kTuning, hash),
                                   " (malformed or of another key); it will be rebuilt"));
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.records[hash] = *record;
  return *record;
}

std::optional<cache::TuningRecord> LookupTunedRecordOnDisk(const cache::TuningKey& key,
                                                           const cache::DiskCache* disk) {
  if (disk == nullptr) return std::nullopt;
  const std::string hash = key.Hash();
  std::optional<cache::Entry> entry = disk->Read(cache::EntryKind::kTuning, hash);
  if (!entry) return std::nullopt;
  auto record = cache::TuningRecordFromEntry(*entry);
  if (!record.ok() || !(record->key == key) || !record->tuned) return std::nullopt;
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  s.records[hash] = *record;
  return *record;
}

void SaveRecord(const cache::TuningRecord& record, const cache::DiskCache* disk) {
  const std::string hash = record.key.Hash();
  {
    Store& s = TheStore();
    std::lock_guard<std::mutex> lock(s.mu);
    s.records[hash] = record;
  }
  if (disk == nullptr) return;
  if (absl::Status st = disk->Write(cache::EntryKind::kTuning, hash, cache::ToEntry(record));
      !st.ok()) {
    log::WarningOnce(absl::StrCat("cannot write to the cache: ", st.message()));
  }
}

void ResetProcessTuningRecords() {
  Store& s = TheStore();
  std::lock_guard<std::mutex> lock(s.mu);
  s.records.clear();
}

}  // namespace torchfuse::autotune
