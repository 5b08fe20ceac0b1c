#include "common/env.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace torchfuse::env {
namespace {

// What a thread of torchfuse's own reads for `name`.
std::optional<std::string> OnOwnThread(const char* name) {
  std::optional<std::string> v;
  std::thread([&] {
    MarkOwnThread();
    EXPECT_TRUE(env::OnOwnThread());
    v = Get(name);
  }).join();
  return v;
}

TEST(EnvTest, OwnThreadsReadWhatTheProgramsThreadsReadLast) {
  const char* name = "TORCHFUSE_DUMP_DIR";
  EXPECT_FALSE(env::OnOwnThread());
  ::setenv(name, "/first", 1);
  EXPECT_EQ(Get(name), "/first");  // read now on this thread
  EXPECT_EQ(OnOwnThread(name), "/first");
  ::setenv(name, "/second", 1);
  EXPECT_EQ(OnOwnThread(name), "/first");  // no program thread has read it since
  Snapshot();
  EXPECT_EQ(OnOwnThread(name), "/second");
  ::unsetenv(name);
  EXPECT_EQ(OnOwnThread(name), "/second");
  EXPECT_EQ(Get(name), std::nullopt);
  EXPECT_EQ(OnOwnThread(name), std::nullopt);
  ::setenv(name, "", 1);
  EXPECT_EQ(GetOr(name, "/fallback"), "/fallback");  // empty counts as unset
  ::setenv(name, "/third", 1);
  EXPECT_EQ(GetOr(name, "/fallback"), "/third");
  ::unsetenv(name);
}

TEST(EnvTest, SnapshotOnAnOwnThreadReadsNothing) {
  const char* name = "TORCHFUSE_DUMP_DIR";
  ::setenv(name, "/before", 1);
  Snapshot();
  ::setenv(name, "/after", 1);
  std::thread([] {
    MarkOwnThread();
    Snapshot();
  }).join();
  EXPECT_EQ(OnOwnThread(name), "/before");
  ::unsetenv(name);
  Snapshot();
}

// A change waits for the Readings held when it is asked for, and a Reading asked for while a
// change waits waits for it (a compile that starts then reads the changed environment).
TEST(EnvTest, ChangesWaitForReadingsAndNewReadingsForChanges) {
  const char* name = "TORCHFUSE_DUMP_DIR";
  ::unsetenv(name);
  std::atomic<bool> held{false}, released{false};
  std::thread reader([&] {
    const Reading reading;
    held = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released = true;
  });
  while (!held) std::this_thread::yield();
  std::thread changer([&] {
    EXPECT_EQ(Set(name, "/changed"), 0);
    EXPECT_TRUE(released.load());
  });
  while (ChangesWaiting() == 0) std::this_thread::yield();
  EXPECT_EQ(Get(name), "/changed");  // its Reading waited for the change
  EXPECT_TRUE(released.load());
  reader.join();
  changer.join();
  EXPECT_EQ(Unset(name), 0);
  EXPECT_EQ(Get(name), std::nullopt);
}

// A burst of changes (mock.patch.dict's unsetting and setting of every variable, with Python's
// own work and the GIL between them) waits for readers once: a thread taking a 20 ms Reading
// again and again (compile after compile) gets no new one while the burst goes on.
TEST(EnvTest, ABurstOfChangesWaitsForReadersOnce) {
  std::atomic<bool> stop{false};
  std::atomic<int> readings{0};
  std::thread reader([&] {
    while (!stop) {
      const Reading reading;
      readings.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  while (readings.load() == 0) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(Set("TF_ENV_TEST_BURST", std::to_string(i)), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the interpreter between two
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  reader.join();
  ::unsetenv("TF_ENV_TEST_BURST");
  // 50 ms of pauses and one wait of at most 20 ms for the Reading in flight; a wait per change
  // would take over a second.
  EXPECT_LT(ms, 400.0);
}

TEST(EnvTest, AChangeOnAThreadThatHoldsAReadingFailsAtOnce) {
  const char* name = "TORCHFUSE_DUMP_DIR";
  {
    const Reading reading;
    const Reading nested;  // waits for nothing
    EXPECT_EQ(Set(name, "/never"), EDEADLK);
  }
  EXPECT_EQ(Get(name), std::nullopt);
  EXPECT_EQ(Set("", "x"), EINVAL);  // setenv's own error
}

// A fork's child has only the forking thread: a Reading another thread held at the fork does
// not hold the child's changes back.
TEST(EnvTest, AForksChildChangesTheEnvironmentDespiteTheParentsReadings) {
  std::atomic<bool> held{false}, release{false};
  std::thread reader([&] {
    const Reading reading;
    held = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!held) std::this_thread::yield();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);  // a child stuck on the gate dies of SIGALRM
    const bool ok = Set("TORCHFUSE_DUMP_DIR", "/child") == 0 &&
                    Get("TORCHFUSE_DUMP_DIR") == std::optional<std::string>("/child") &&
                    Unset("TORCHFUSE_DUMP_DIR") == 0;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  release = true;
  reader.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// Every variable the library reads goes through env::Get: no other source file of the library
// (or of its Python extension) calls getenv, and every TORCHFUSE_ variable its sources name is
// one a Snapshot reads (else torchfuse's threads would see it unset).
TEST(EnvTest, NoLibrarySourceCallsGetenvItself) {
  namespace fs = std::filesystem;
  const fs::path root = TF_SOURCE_DIR;
  const std::vector<std::string> known = SnapshotVariables();
  const std::regex variable("\"(TORCHFUSE_[A-Z_]+)\"");
  int files = 0, names = 0;
  for (const char* dir : {"autotune", "cache", "codegen_nvrtc", "common", "frontend_torch",
                          "fusion", "graph", "runtime", "python"}) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h") continue;
      ++files;
      if (e.path() == root / "common" / "env.cc") continue;
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string source = text.str();
      EXPECT_EQ(source.find("getenv("), std::string::npos)
          << e.path() << " calls getenv: read variables through common/env.h";
      for (std::sregex_iterator m(source.begin(), source.end(), variable), end; m != end; ++m) {
        ++names;
        EXPECT_NE(std::find(known.begin(), known.end(), (*m)[1].str()), known.end())
            << e.path() << " names " << (*m)[1] << ", which env.cc's kVariables lacks";
      }
    }
  }
  EXPECT_GT(files, 50);
  EXPECT_GT(names, 15);
}

}  // namespace
}  // namespace torchfuse::env
