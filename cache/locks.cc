#include "cache/locks.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cache/files.h"
#include "common/log.h"

namespace torchfuse::cache {
namespace {

std::string LockPath(const DiskCache& cache, const std::string& name) {
  return absl::StrCat(cache.LockDir(), "/", name);
}

std::string HostName() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

// The lock file, opened (and created) for locking; -1 when that fails.
int OpenLockFile(const DiskCache& cache, const std::string& name) {
  const std::string path = LockPath(cache, name);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    // A cache cleared meanwhile, or made by a build without locks: make the folder.
    if (MakeDirs(cache.LockDir()).ok()) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
  }
  if (fd < 0) {
    log::WarningOnce(absl::StrCat("cannot open lock file ", path, ": ", std::strerror(errno),
                            "; processes sharing this cache may tune the same kernel"));
  }
  return fd;
}

}  // namespace

FileLock::~FileLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

std::unique_ptr<FileLock> FileLock::TryAcquire(const DiskCache& cache, const std::string& name) {
  const int fd = OpenLockFile(cache, name);
  if (fd < 0) return nullptr;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return nullptr;
  }
  // Who holds it, for whoever looks at the file.
  const std::string who = absl::StrCat(::getpid(), " ", HostName(), "\n");
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, who.data(), who.size(), 0);
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

std::unique_ptr<FileLock> FileLock::Acquire(const DiskCache& cache, const std::string& name,
                                            double timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(timeout_ms * 1000));
  while (true) {
    if (auto lock = TryAcquire(cache, name)) return lock;
    if (std::chrono::steady_clock::now() >= deadline) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool FileLock::Held(const DiskCache& cache, const std::string& name) {
  const int fd = ::open(LockPath(cache, name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // A shared lock is refused while anyone holds the exclusive one; flock locks of one process
  // on two descriptors conflict too, so this process's own lock counts as held.
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // drops the shared lock if it was taken
  return held;
}

std::string TuningLockName(const std::string& key_hash) { return "tune-" + key_hash; }

std::string GpuLockName(const std::string& bus_id) {
  std::string id = absl::StrCat("gpu-", HostName(), "-", bus_id);
  for (char& c : id) {
    if (c == '/' || c == ' ') c = '_';
  }
  return id;
}

}  // namespace torchfuse::cache
