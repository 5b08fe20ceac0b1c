#include "codegen_nvrtc/compile_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/files.h"
#include "codegen_nvrtc/compile_worker.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "common/env.h"

extern char** environ;

namespace torchfuse::codegen {
namespace {

codegen::KernelSource Kernel(int i) {
  codegen::KernelSource k;
  k.name = "k" + std::to_string(i);
  k.source = "extern \"C\" __global__ void " + k.name +
             "(float* x) {\n#pragma unroll 64\n  for (int j = 0; j < 4096; ++j) x[j] = "
             "__expf(x[j] * " + std::to_string(i) + ".0f) + sqrtf(x[j]);\n}\n";
  return k;
}

// The process's variables and sixty more (TF_ENV_TEST_*): what a loop unsets and sets again.
std::vector<std::pair<std::string, std::string>> EnvironmentAndSixtyMore() {
  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (int i = 0; i < 60; ++i) vars.emplace_back("TF_ENV_TEST_" + std::to_string(i), "x");
  return vars;
}

void UnsetTheSixty() {
  for (int i = 0; i < 60; ++i) ::unsetenv(("TF_ENV_TEST_" + std::to_string(i)).c_str());
}

TEST(CompilePoolTest, RunsEveryJobUrgentOnesFirstAndWaits) {
  std::atomic<int> done{0};
  for (int i = 0; i < 6; ++i) SubmitCompile([&] { done.fetch_add(1); });
  WaitForCompiles();
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(PendingCompiles(), 0);
}

TEST(CompilePoolTest, ConcurrentWantsOfOneKernelCompileItOnce) {
  codegen::ResetProcessKernelCache();
  const codegen::KernelSource k = Kernel(1000);
  const int64_t before = codegen::NvrtcCompileCount();
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    SubmitCompile([&] { ok.fetch_add(codegen::GetOrCompile(k, 90, nullptr).ok()); });
  }
  EXPECT_TRUE(codegen::GetOrCompile(k, 90, nullptr).ok());
  WaitForCompiles();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(codegen::NvrtcCompileCount() - before, 1);
}

// IsCompiled answers at once whether the process's table holds a kernel's image for an arch:
// not before its compile, nor while it runs (a call that asks does not wait for NVRTC), and
// once it has, for that arch and that source only.
TEST(CompilePoolTest, IsCompiledAnswersWithoutWaitingForTheCompile) {
  codegen::ResetProcessKernelCache();
  const codegen::KernelSource k = Kernel(2000);
  EXPECT_FALSE(codegen::IsCompiled(k, 90));
  codegen::CompileAhead(k, 90, nullptr);
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_FALSE(codegen::IsCompiled(k, 90));  // an NVRTC compile takes tens of ms at least
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(20));
  WaitForCompiles();
  EXPECT_TRUE(codegen::IsCompiled(k, 90));
  EXPECT_FALSE(codegen::IsCompiled(k, 89));
  codegen::KernelSource other = k;
  other.source += "// another source under the same name\n";
  EXPECT_FALSE(codegen::IsCompiled(other, 90));
  codegen::ResetProcessKernelCache();
  EXPECT_FALSE(codegen::IsCompiled(k, 90));
}

// Tuning candidates (jobs that are not urgent) run on their share of the threads, so that a
// kernel a call waits for finds a thread free, and the caller's own thread is not slowed by
// a pool's worth of compiles. Needs the pool made here, from these variables: ctest runs each
// test in its own process.
TEST(CompilePoolTest, BackgroundJobsRunOnTheirShareOfThreadsUrgentOnesOnAny) {
  setenv("TORCHFUSE_COMPILE_THREADS", "3", 1);
  setenv("TORCHFUSE_BACKGROUND_COMPILES", "1", 1);
  const CompilePoolShape shape = GetCompilePoolShape();
  ASSERT_EQ(shape.threads, 3) << "the pool was made before this test (run it alone)";
  ASSERT_EQ(shape.background, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> running{0}, most{0}, done{0};
  for (int i = 0; i < 4; ++i) {
    SubmitCompile([&] {
      const int now = running.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
      running.fetch_sub(1);
      done.fetch_add(1);
    });
  }
  // Two threads are idle while the first background job is held: an urgent job runs at once,
  // and neither takes a second background job.
  std::promise<void> urgent_ran;
  std::future<void> urgent = urgent_ran.get_future();
  SubmitCompile([&] { urgent_ran.set_value(); }, /*urgent=*/true);
  EXPECT_EQ(urgent.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(done.load(), 0);
  EXPECT_EQ(most.load(), 1);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  WaitForCompiles();
  EXPECT_EQ(done.load(), 4);
  EXPECT_EQ(most.load(), 1);
  EXPECT_EQ(PendingCompiles(), 0);
}

// The pool's threads never call getenv, which races the program's changes to the environment:
// here jobs read variables (through env::Get, and as a compile does: the temporary directory,
// the workers' switch) while this thread unsets and sets every variable again and again, as
// Python's mock.patch.dict(os.environ) does as it exits. On glibc 2.36 two threads calling
// getenv beside such a loop crashed within seconds. The jobs see each variable as this thread
// saw it when it queued them.
TEST(CompilePoolTest, JobsReadTheEnvironmentAsQueuedWithoutGetenv) {
  ::setenv("TORCHFUSE_DUMP_DIR", "/as-queued", 1);
  const std::vector<std::pair<std::string, std::string>> vars = EnvironmentAndSixtyMore();
  std::atomic<bool> stop{false};
  std::atomic<int> started{0}, wrong{0};
  std::atomic<long> reads{0};
  for (int i = 0; i < 2; ++i) {
    SubmitCompile(
        [&] {
          started.fetch_add(1);
          while (!stop.load()) {
            if (env::GetOr("TORCHFUSE_DUMP_DIR", "") != "/as-queued") wrong.fetch_add(1);
            (void)cache::TempDir();
            (void)CompileWorkerPath();
            (void)env::Get("HOME");
            reads.fetch_add(1);
          }
        },
        /*urgent=*/true);
  }
  while (started.load() == 0) std::this_thread::yield();
  for (int round = 0; round < 4000; ++round) {
    for (const auto& kv : vars) ::unsetenv(kv.first.c_str());
    for (const auto& kv : vars) {
      ::setenv(kv.first.c_str(),
               kv.first == "TORCHFUSE_DUMP_DIR" ? "/changed" : kv.second.c_str(), 1);
    }
  }
  stop.store(true);
  WaitForCompiles();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  UnsetTheSixty();
  ::unsetenv("TORCHFUSE_DUMP_DIR");
}

// A change of the environment asked for while NVRTC compiles on a pool thread returns only
// once that compile is over (it holds a Reading from start to end).
TEST(CompilePoolTest, AnEnvironmentChangeWaitsForTheCompileInFlight) {
  codegen::ResetProcessKernelCache();
  std::atomic<bool> compiled{false};
  std::atomic<int> ok{0};
  const KernelSource k = Kernel(4000);
  SubmitCompile([&] {
    CompiledImage image;
    ok.fetch_add(CompileInThisProcess({k.name, "sm_90", true, k.source}, &image).ok());
    compiled = true;
  });
  while (env::ReadingsHeld() == 0 && !compiled.load()) std::this_thread::yield();
  ASSERT_FALSE(compiled.load()) << "the compile ended before this thread saw it start";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(env::Set("TF_ENV_TEST_WAIT", "1"), 0);
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(env::ReadingsHeld(), 0);
  EXPECT_GT(waited_ms, 5.0) << "the change did not wait for the compile";
  WaitForCompiles();
  EXPECT_EQ(ok.load(), 1);
  ::unsetenv("TF_ENV_TEST_WAIT");
}

// NVRTC reads the environment on the pool's threads as it compiles: changes made through
// env::Set and env::Unset (where the Python package sends os.environ's) wait for compiles in
// flight, and rounds of unsetting and setting every variable beside a batch of compiles
// neither fail a compile nor stall either side. (With ::setenv and ::unsetenv in an unpaused
// form of this loop, the process crashed in NVRTC's getenv in 1 of 5 runs on glibc 2.36; the
// test above checks the wait itself.)
TEST(CompilePoolTest, NvrtcCompilesBesideEnvironmentChangesThroughTheGate) {
  const std::vector<std::pair<std::string, std::string>> vars = EnvironmentAndSixtyMore();
  constexpr int kCompiles = 12;
  std::atomic<int> done{0}, ok{0};
  for (int i = 0; i < kCompiles; ++i) {
    SubmitCompile([&, i] {
      CompiledImage image;
      const KernelSource k = Kernel(3000 + i);
      ok.fetch_add(CompileInThisProcess({k.name, "sm_90", true, k.source}, &image).ok() &&
                   !image.data.empty());
      done.fetch_add(1);
    });
  }
  // Changes come first (a compile waits while one is waiting, and 5 ms after the last): rounds
  // with pauses between them, so that the compiles run beside them rather than after them.
  int beside = 0, failed = 0;
  for (int round = 0; round < 200 && done.load() < kCompiles; ++round) {
    for (const auto& kv : vars) failed += env::Unset(kv.first) != 0;
    for (const auto& kv : vars) failed += env::Set(kv.first, kv.second) != 0;
    beside += done.load() < kCompiles;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // compiles start here
  }
  WaitForCompiles();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(ok.load(), kCompiles);
  EXPECT_GT(beside, 0);
  UnsetTheSixty();
}

// A fork of a process whose pool runs a job has none of the pool's threads: exiting there
// must not wait for that job (the parent's), nor hang.
TEST(CompilePoolTest, AForkExitsWithoutWaitingForTheParentsCompiles) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::promise<void> started;
  std::future<void> running = started.get_future();
  SubmitCompile([&] {
    started.set_value();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  }, /*urgent=*/true);
  ASSERT_EQ(running.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SubmitCompile([] {});  // this thread's exit guard, made in the fork
    std::exit(0);          // runs the exit guard and StopCompiles: neither may wait
  }
  int status = -1;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) ::kill(child, SIGKILL), ::waitpid(child, &status, 0);
  EXPECT_EQ(done, child) << "the fork did not exit within 10 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  WaitForCompiles();
}

// The process exits while background compiles are in flight and queued: it must exit
// cleanly (ctest reports a crash at exit as a failure of this test).
TEST(CompilePoolTest, ExitWithCompilesInFlight) {
  for (int i = 0; i < 16; ++i) {
    SubmitCompile([k = Kernel(i)] { (void)codegen::GetOrCompile(k, 90, nullptr); });
  }
  EXPECT_GT(PendingCompiles(), 0);
}

// The same after this thread compiled one kernel itself (a first call's kernel), as a
// program does that exits from main while its background candidates are in their threads'
// first compiles.
TEST(CompilePoolTest, ExitWithFirstCompilesInFlightAfterOneHere) {
  ASSERT_TRUE(codegen::GetOrCompile(Kernel(100), 90, nullptr).ok());
  for (int i = 0; i < 16; ++i) {
    SubmitCompile([k = Kernel(i)] { (void)codegen::GetOrCompile(k, 90, nullptr); },
                  /*urgent=*/i % 2 == 0);
  }
  EXPECT_GT(PendingCompiles(), 0);
}

}  // namespace
}  // namespace torchfuse::codegen
