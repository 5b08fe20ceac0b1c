// Caches that ship: a cache's binaries and tuning records packed into one tar file, and
// unpacked into another cache on another host (a build job precompiles for sm_90 without a GPU
// and ships the result to every host).
//
// The archive is a POSIX ustar file: first `torchfuse-cache-archive.json` (format, the cache
// format version, and each entry's path, size and SHA-256), then each entry's file as the cache
// holds it (`v2/bin/<key>`, `v2/tune/<key>`). Import checks everything before it writes
// anything: an archive with a path outside the cache's entries, a member that is not a plain
// file, another cache format version, a size or checksum that differs from the manifest, or an
// entry that does not decode is refused whole, with a message naming what is wrong.
#ifndef TORCHFUSE_CACHE_ARCHIVE_H_
#define TORCHFUSE_CACHE_ARCHIVE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "cache/disk_cache.h"

namespace torchfuse::cache {

struct ArchiveReport {
  int binaries = 0;
  int tuning_records = 0;
  int unchanged = 0;  // import: entries the cache already held with the same bytes
  int64_t bytes = 0;  // of the entries
  std::string ToString() const;
};

/// Packs every readable entry of `cache` into the tar file `path` (replaced if it exists).
absl::StatusOr<ArchiveReport> ExportCache(const DiskCache& cache, const std::string& path);

/// Unpacks the tar file `path` into `cache`, after checking all of it.
absl::StatusOr<ArchiveReport> ImportCache(const DiskCache& cache, const std::string& path);

}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_ARCHIVE_H_
