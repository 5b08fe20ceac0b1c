#include "codegen_nvrtc/compile_worker.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "codegen_nvrtc/nvrtc_compiler.h"
#include "../support/scoped_env.h"

namespace torchfuse::codegen {
namespace {

// A kernel whose source is unique to `i`, so that no cache can answer for it.
std::string Source(int i) {
  return "extern \"C\" __global__ void k" + std::to_string(i) +
         "(float* x) {\n#pragma unroll 8\n  for (int j = 0; j < 64; ++j) x[j] = __expf(x[j] * " +
         std::to_string(i) + ".0f) + sqrtf(x[j]);\n}\n";
}

using ::torchfuse::test_support::ScopedEnv;

class CompileWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(CompileWorkerPath().empty()) << "the build makes torchfuse-nvrtc-worker";
  }
  void TearDown() override { StopIdleCompileWorkers(); }
  ScopedEnv on_{"TORCHFUSE_COMPILE_WORKERS", "1"};  // workers are opt-in
};

// No worker can take compiles: CompileWorkerPath says why (`reason` is in it), and a compile of
// kernel `id` runs in this process, starting and using no worker.
void ExpectCompilesInThisProcess(const std::string& reason, int id) {
  std::string why;
  EXPECT_TRUE(CompileWorkerPath(&why).empty());
  EXPECT_NE(why.find(reason), std::string::npos) << why;
  const CompileWorkerStats before = GetCompileWorkerStats();
  ASSERT_TRUE(CompileCuda(Source(id), "k" + std::to_string(id), 90).ok());
  const CompileWorkerStats after = GetCompileWorkerStats();
  EXPECT_EQ(after.in_process, before.in_process + 1);
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.started, before.started);
}

TEST(CompileWorkerDefaultTest, CompilesRunInThisProcessUnlessWorkersAreAskedFor) {
  ::unsetenv("TORCHFUSE_COMPILE_WORKERS");
  ExpectCompilesInThisProcess("TORCHFUSE_COMPILE_WORKERS", 30);
  const int64_t started = GetCompileWorkerStats().started;
  PrestartCompileWorkers(2);
  EXPECT_EQ(GetCompileWorkerStats().started, started);
}

TEST_F(CompileWorkerTest, CompilesInAWorkerTheImageThisProcessWouldMake) {
  const CompileWorkerStats before = GetCompileWorkerStats();
  absl::StatusOr<CompiledImage> worker = CompileCuda(Source(1), "k1", 90);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(GetCompileWorkerStats().compiles, before.compiles + 1);
  EXPECT_EQ(GetCompileWorkerStats().in_process, before.in_process);
  CompiledImage here;
  ASSERT_TRUE(CompileInThisProcess({"k1", "sm_90", true, Source(1)}, &here).ok());
  EXPECT_FALSE(worker->is_ptx);
  EXPECT_EQ(worker->arch, 90);
  EXPECT_EQ(worker->data, here.data);

  absl::StatusOr<std::string> ptx = CompilePtx(Source(2), "k2", 90);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_NE(ptx->find(".entry k2"), std::string::npos);
  EXPECT_EQ(GetCompileWorkerStats().compiles, before.compiles + 2);
}

// The nice value of process `pid` (field 19 of /proc/PID/stat).
int NiceOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (name) "
  std::string f;
  for (int i = 3; i <= 19; ++i) fields >> f;
  return std::stoi(f);
}

TEST_F(CompileWorkerTest, WorkersRunBelowTheCallersPriority) {
  ASSERT_TRUE(CompileCuda(Source(13), "k13", 90).ok());
  const CompileWorkerStats s = GetCompileWorkerStats();
  ASSERT_FALSE(s.idle_pids.empty());
  const int mine = NiceOf(::getpid());
  for (int pid : s.idle_pids) EXPECT_GT(NiceOf(pid), mine) << pid;
}

TEST_F(CompileWorkerTest, AFailedCompileComesBackWithTheLogAndTheKernel) {
  const CompileWorkerStats before = GetCompileWorkerStats();
  absl::StatusOr<CompiledImage> image =
      CompileCuda("extern \"C\" __global__ void k() { undefined_thing(); }\n", "tf_broken", 90);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(image.status().message());
  EXPECT_NE(msg.find("tf_broken"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined_thing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("source dumped to "), std::string::npos) << msg;
  EXPECT_EQ(GetCompileWorkerStats().compiles, before.compiles + 1);
  // The worker lives on: the next compile needs no new one.
  const int64_t started = GetCompileWorkerStats().started;
  ASSERT_TRUE(CompileCuda(Source(3), "k3", 90).ok());
  EXPECT_EQ(GetCompileWorkerStats().started, started);
}

TEST_F(CompileWorkerTest, ConcurrentCompilesEachGetAWorker) {
  StopIdleCompileWorkers();
  const CompileWorkerStats before = GetCompileWorkerStats();
  constexpr int kThreads = 4;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ok] {
      for (int i = 0; i < 3; ++i) {
        const int id = 100 + t * 10 + i;
        ok.fetch_add(CompileCuda(Source(id), "k" + std::to_string(id), 90).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const CompileWorkerStats after = GetCompileWorkerStats();
  EXPECT_EQ(ok.load(), 3 * kThreads);
  EXPECT_EQ(after.compiles, before.compiles + 3 * kThreads);
  // Workers are reused: never more than one per concurrent caller.
  EXPECT_GE(after.started - before.started, 1);
  EXPECT_LE(after.started - before.started, kThreads);
  EXPECT_EQ(after.idle_pids.size(), static_cast<size_t>(after.started - before.started));
}

TEST_F(CompileWorkerTest, PrestartedWorkersServeTheNextCompiles) {
  StopIdleCompileWorkers();
  const CompileWorkerStats before = GetCompileWorkerStats();
  PrestartCompileWorkers(3);
  const CompileWorkerStats started = GetCompileWorkerStats();
  EXPECT_EQ(started.started, before.started + 3);
  EXPECT_EQ(started.idle_pids.size(), 3u);
  PrestartCompileWorkers(2);  // enough are idle already
  EXPECT_EQ(GetCompileWorkerStats().started, started.started);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t, &ok] { ok.fetch_add(CompileCuda(Source(20 + t), "kp", 90).ok()); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(GetCompileWorkerStats().started, started.started);
  {
    StopIdleCompileWorkers();
    ScopedEnv off("TORCHFUSE_COMPILE_WORKERS", "0");
    PrestartCompileWorkers(2);
    EXPECT_EQ(GetCompileWorkerStats().started, started.started);
  }
}

TEST_F(CompileWorkerTest, AWorkerKilledWhileIdleIsReplaced) {
  ASSERT_TRUE(CompileCuda(Source(4), "k4", 90).ok());
  const CompileWorkerStats before = GetCompileWorkerStats();
  ASSERT_FALSE(before.idle_pids.empty());
  for (int pid : before.idle_pids) ::kill(pid, SIGKILL);
  absl::StatusOr<CompiledImage> image = CompileCuda(Source(5), "k5", 90);
  ASSERT_TRUE(image.ok()) << image.status();
  const CompileWorkerStats after = GetCompileWorkerStats();
  EXPECT_EQ(after.lost, before.lost + 1);
  EXPECT_EQ(after.started, before.started + 1);
  EXPECT_EQ(after.compiles, before.compiles + 1);
}

TEST_F(CompileWorkerTest, AWorkerThatDiesTwiceIsTheCompilesErrorNotTheCallers) {
  // A "worker" that kills itself as soon as it starts, as one crashing inside NVRTC would.
  const std::string script = ::testing::TempDir() + "/tf_dying_worker.sh";
  std::ofstream(script) << "#!/bin/sh\nkill -9 $$\n";
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  StopIdleCompileWorkers();
  ScopedEnv env("TORCHFUSE_NVRTC_WORKER", script);
  const CompileWorkerStats before = GetCompileWorkerStats();
  absl::StatusOr<CompiledImage> image = CompileCuda(Source(6), "tf_doomed", 90);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInternal);
  const std::string msg(image.status().message());
  EXPECT_NE(msg.find("tf_doomed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("died"), std::string::npos) << msg;
  EXPECT_EQ(GetCompileWorkerStats().lost, before.lost + 2);
}

TEST_F(CompileWorkerTest, WithoutAWorkerCompilesRunInThisProcess) {
  ASSERT_TRUE(CompileCuda(Source(12), "k12", 90).ok());
  ASSERT_FALSE(GetCompileWorkerStats().idle_pids.empty());
  {
    // Turned off, idle workers are not used either.
    ScopedEnv off("TORCHFUSE_COMPILE_WORKERS", "0");
    ExpectCompilesInThisProcess("TORCHFUSE_COMPILE_WORKERS", 7);
  }
  StopIdleCompileWorkers();
  {
    ScopedEnv missing("TORCHFUSE_NVRTC_WORKER", "/nonexistent/torchfuse-nvrtc-worker");
    ExpectCompilesInThisProcess("/nonexistent", 8);
  }
}

TEST_F(CompileWorkerTest, AForkedProcessStartsWorkersOfItsOwn) {
  ASSERT_TRUE(CompileCuda(Source(9), "k9", 90).ok());
  ASSERT_FALSE(GetCompileWorkerStats().idle_pids.empty());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's idle workers are not the child's: it must start one and compile.
    const CompileWorkerStats before = GetCompileWorkerStats();
    const bool ok = before.idle_pids.empty() && CompileCuda(Source(10), "k10", 90).ok() &&
                    GetCompileWorkerStats().started == before.started + 1;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's worker was not disturbed.
  const CompileWorkerStats before = GetCompileWorkerStats();
  ASSERT_TRUE(CompileCuda(Source(11), "k11", 90).ok());
  EXPECT_EQ(GetCompileWorkerStats().started, before.started);
  EXPECT_EQ(GetCompileWorkerStats().lost, before.lost);
}

// A fork that lives on (a data loader's worker, say) holds no copy of the parent's sockets:
// the parent's workers still end when the parent lets them go.
TEST_F(CompileWorkerTest, AForkThatLivesOnDoesNotKeepTheParentsWorkersAlive) {
  ASSERT_TRUE(CompileCuda(Source(14), "k14", 90).ok());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    (void)CompileCuda(Source(15), "k15", 90);  // the child's first use of the workers
    (void)!::write(ready[1], "x", 1);
    ::sleep(60);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  std::atomic<bool> stopped{false};
  std::thread stop([&] {
    StopIdleCompileWorkers();  // waits for each worker to see the end of its input
    stopped = true;
  });
  for (int i = 0; i < 200 && !stopped; ++i) ::usleep(50000);
  EXPECT_TRUE(stopped.load()) << "a worker outlived its socket: the fork held a copy";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  stop.join();
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(CompileWorkerTest, TheWorkerEndsAtTheEndOfInputAndOnABrokenRequest) {
  for (const bool broken : {false, true}) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int code = -1;
    std::thread server([&] { code = ServeCompileRequests(sv[1]); });
    if (broken) {
      ASSERT_EQ(::write(sv[0], "nonsense", 8), 8);
    }
    ::shutdown(sv[0], SHUT_WR);
    server.join();
    EXPECT_EQ(code, broken ? 1 : 0);
    ::close(sv[0]);
    ::close(sv[1]);
  }
}

}  // namespace
}  // namespace torchfuse::codegen
