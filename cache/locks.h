// Locks that processes sharing a cache directory (one host, or a network file system) take so
// that each kernel is tuned once, and no two processes time candidates on one GPU at once.
//
// A lock is an advisory lock (flock) on a file under <cache>/v2/lock/. The kernel drops it when
// its holder exits, crashed or not, so a dead tuner's lock is taken over by the next process
// that asks; the files themselves stay (they hold only the holder's pid and host, for
// listings) and `cache clear` removes them.
#ifndef TORCHFUSE_CACHE_LOCKS_H_
#define TORCHFUSE_CACHE_LOCKS_H_

#include <memory>
#include <string>

#include "cache/disk_cache.h"

namespace torchfuse::cache {

/// A held lock; released when destroyed.
class FileLock {
 public:
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  /// Takes the lock `name` of `cache` if no process holds it; nullptr when one does, or when
  /// the lock file cannot be opened (reported once: tuning then goes on unlocked).
  static std::unique_ptr<FileLock> TryAcquire(const DiskCache& cache, const std::string& name);
  /// Waits up to `timeout_ms` for the lock; nullptr at the timeout.
  static std::unique_ptr<FileLock> Acquire(const DiskCache& cache, const std::string& name,
                                           double timeout_ms);
  /// Whether some process (this one included) holds the lock `name` now.
  static bool Held(const DiskCache& cache, const std::string& name);

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

/// The lock name of the tuning of a record key ("tune-<key hash>").
std::string TuningLockName(const std::string& key_hash);
/// The lock name of timing on one GPU: host and PCI bus id ("gpu-<host>-<bus id>").
std::string GpuLockName(const std::string& bus_id);

}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_LOCKS_H_
