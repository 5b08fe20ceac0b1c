// The on-disk cache: kernel binaries and tuning records, shared by processes and kept across
// runs. Content-addressed files, written to a temp file and renamed into place, each with a
// format version and a checksum.
#ifndef TORCHFUSE_CACHE_DISK_CACHE_H_
#define TORCHFUSE_CACHE_DISK_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchfuse::cache {

/// Bumped whenever the entry format or the meaning of a key changes; entries of other versions
/// are ignored (and rebuilt).
inline constexpr int kFormatVersion = 2;

/// The cache directory: $TORCHFUSE_CACHE_DIR, else $XDG_CACHE_HOME/torchfuse, else
/// $HOME/.cache/torchfuse.
std::string DefaultCacheDir();

/// What an entry holds.
enum class EntryKind {
  kBinary,  // a compiled kernel image (cubin or PTX)
  kTuning,  // a tuning record: the variant chosen for a kernel spec and shape bucket
};

/// The folder name of a kind ("bin", "tune").
const char* EntryKindDir(EntryKind kind);

/// One entry: text fields and a byte payload.
struct Entry {
  std::map<std::string, std::string> fields;
  std::string payload;
  /// The field's value, or "" when absent.
  std::string Get(const std::string& key) const;
};

/// The bytes of an entry: a version line ("torchfuse-cache 2"), a one-line JSON header
/// ({"fields": {...}, "payload_bytes": N}), the payload, and a line with the SHA-256 of all
/// that. Entries of other versions live in other folders (v1/, v2/) and are never read.
std::string EncodeEntry(const Entry& entry);

/// Parses bytes of EncodeEntry. DataLoss when truncated or corrupt, FailedPrecondition when of
/// another format version.
absl::StatusOr<Entry> DecodeEntry(absl::string_view bytes);

/// An entry as found on disk, for listing.
struct ListedEntry {
  EntryKind kind;
  std::string key;
  std::string path;
  int64_t size_bytes = 0;
  int64_t modified_unix = 0;
  std::optional<Entry> entry;  // absent when unreadable
  std::string problem;         // why it is unreadable
};

/// A cache directory. Thread-safe; any number of processes may share one directory.
class DiskCache {
 public:
  /// Opens (creating it 0700 if needed) the cache at `dir`. A directory that other users can
  /// write, or that another user owns, is opened untrusted: binaries are neither loaded from
  /// it nor written to it (reported once).
  static absl::StatusOr<std::shared_ptr<DiskCache>> Open(const std::string& dir);

  /// The process's cache at DefaultCacheDir(), opened once; nullptr when it cannot be opened
  /// (reported once) or when TORCHFUSE_CACHE=0.
  static std::shared_ptr<DiskCache> Default();

  const std::string& dir() const { return dir_; }
  /// May binaries be loaded from here?
  bool trusted() const { return trusted_; }

  /// The entry of `kind` under `key` (hex digits); nullopt on a miss. An entry that is
  /// truncated, corrupt or of another version counts as a miss, is reported once and removed.
  /// Binaries of an untrusted cache always miss.
  std::optional<Entry> Read(EntryKind kind, const std::string& key) const;
  /// Writes the entry atomically (temp file, then rename), replacing any entry of that key.
  absl::Status Write(EntryKind kind, const std::string& key, const Entry& entry) const;
  /// Removes one entry (no error when absent).
  absl::Status Remove(EntryKind kind, const std::string& key) const;

  /// Every entry of this format version, sorted by kind and key.
  std::vector<ListedEntry> List() const;
  /// Removes every entry of every version, and stray temp files; keeps the directory.
  absl::Status Clear() const;

  /// The path of an entry.
  std::string PathOf(EntryKind kind, const std::string& key) const;
  /// The folder of the lock files (cache/locks.h).
  std::string LockDir() const;

 private:
  DiskCache(std::string dir, bool trusted) : dir_(std::move(dir)), trusted_(trusted) {}
  std::string dir_;
  bool trusted_;
};


}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_DISK_CACHE_H_
