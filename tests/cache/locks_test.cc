// Locks between processes sharing a cache: one holder at a time, and a crashed holder's lock is
// taken over.
#include "cache/locks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "cache/files.h"

namespace torchfuse::cache {
namespace {

class LocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir() + "/tf-locks-" + std::to_string(::getpid());
    ASSERT_TRUE(RemoveTree(dir_).ok());
    auto c = DiskCache::Open(dir_);
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = *c;
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  // A child process that takes `name`, says so through a pipe, and holds it until killed.
  pid_t HoldInChild(const std::string& name) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      auto lock = FileLock::TryAcquire(*cache_, name);
      const char ok = lock != nullptr ? '1' : '0';
      (void)!::write(fds[1], &ok, 1);
      while (true) ::pause();
    }
    ::close(fds[1]);
    char ok = 0;
    EXPECT_EQ(::read(fds[0], &ok, 1), 1);
    ::close(fds[0]);
    EXPECT_EQ(ok, '1');
    return pid;
  }

  std::string dir_;
  std::shared_ptr<DiskCache> cache_;
};

TEST_F(LocksTest, OneHolderAtATimeAndACrashedHoldersLockIsTakenOver) {
  const std::string name = TuningLockName(std::string(64, 'c'));
  EXPECT_FALSE(FileLock::Held(*cache_, name));
  const pid_t child = HoldInChild(name);
  EXPECT_TRUE(FileLock::Held(*cache_, name));
  EXPECT_EQ(FileLock::TryAcquire(*cache_, name), nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(FileLock::Acquire(*cache_, name, 200), nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  // The holder dies without releasing anything: the lock is free at once.
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(FileLock::Held(*cache_, name));
  auto mine = FileLock::Acquire(*cache_, name, 1000);
  ASSERT_NE(mine, nullptr);
  EXPECT_TRUE(FileLock::Held(*cache_, name));
  EXPECT_EQ(FileLock::TryAcquire(*cache_, name), nullptr);  // not twice, even in one process
  mine.reset();
  EXPECT_FALSE(FileLock::Held(*cache_, name));
  EXPECT_NE(FileLock::TryAcquire(*cache_, name), nullptr);
}

TEST_F(LocksTest, LocksOfDifferentKeysAndGpusAreIndependent) {
  auto a = FileLock::TryAcquire(*cache_, TuningLockName(std::string(64, 'a')));
  auto b = FileLock::TryAcquire(*cache_, TuningLockName(std::string(64, 'b')));
  auto g0 = FileLock::TryAcquire(*cache_, GpuLockName("0000:1b:00.0"));
  auto g1 = FileLock::TryAcquire(*cache_, GpuLockName("0000:2c:00.0"));
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_NE(g0, nullptr);
  EXPECT_NE(g1, nullptr);
  EXPECT_EQ(GpuLockName("0000:1b:00.0").find('/'), std::string::npos);
}

TEST_F(LocksTest, ClearRemovesLockFilesAndLocksStillWorkAfterwards) {
  { auto a = FileLock::TryAcquire(*cache_, "tune-x"); ASSERT_NE(a, nullptr); }
  EXPECT_EQ(ListFilesRecursively(dir_).size(), 1u);
  ASSERT_TRUE(cache_->Clear().ok());
  EXPECT_TRUE(ListFilesRecursively(dir_).empty());
  EXPECT_NE(FileLock::TryAcquire(*cache_, "tune-x"), nullptr);
}

}  // namespace
}  // namespace torchfuse::cache
