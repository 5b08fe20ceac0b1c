#include "codegen_nvrtc/compile_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "codegen_nvrtc/compile_worker.h"
#include "common/env.h"

namespace torchfuse::codegen {
namespace {

class Pool {
 public:
  Pool()
      : threads_(CompileConcurrency()),
        background_limit_(std::min(BackgroundCompileConcurrency(), threads_)) {
    // Threads park on the pool's condition variable for the life of the process, never
    // joined: exit only drops the queue and waits for the compiles in flight (Stop).
    for (int i = 0; i < threads_; ++i) {
      std::thread([this] {
        env::MarkOwnThread();  // never getenv here (common/env.h)
        Work();
      }).detach();
    }
    // Registered again after each thread's first compile (nvrtc_compiler.cc), so that it
    // runs before the exit handlers NVRTC registers on first use.
    std::atexit(StopCompiles);
  }

  static Pool* The() {
    static Pool* const pool = [] {
      Pool* p = new Pool();  // never destroyed: its threads park for the life of the process
      existing.store(p);
      return p;
    }();
    return pool;
  }
  // The pool if one was made (exit makes none).
  static Pool* Existing() { return existing.load(); }

  void Submit(std::function<void()> job, bool urgent) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      (urgent ? urgent_ : jobs_).push_back(std::move(job));
      ++pending_;
    }
    wake_.notify_one();
  }

  CompilePoolShape Shape() const { return {threads_, background_limit_}; }

  int Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_;
  }

  void Stop() {
    // A fork's copy of the pool has none of its threads (a fork copies only the thread that
    // forks) and may hold a lock or a count of theirs: nothing runs here to wait for.
    if (::getpid() != owner_) return;
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    pending_ -= static_cast<int>(urgent_.size() + jobs_.size());
    urgent_.clear();
    jobs_.clear();
    idle_.notify_all();
    idle_.wait(lock, [this] { return running_ == 0; });
  }

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0 || (stopping_ && running_ == 0); });
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> job;
      bool background = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // An urgent job whenever one is queued; another only while fewer than
        // background_limit_ of them run.
        wake_.wait(lock, [this] {
          return !stopping_ && (!urgent_.empty() ||
                                (!jobs_.empty() && background_running_ < background_limit_));
        });
        background = urgent_.empty();
        std::deque<std::function<void()>>& from = background ? jobs_ : urgent_;
        job = std::move(from.front());
        from.pop_front();
        ++running_;
        if (background) ++background_running_;
      }
      job();
      // What the job holds (a disk cache, a kernel's source) goes before Stop may return: exit
      // destroys statics once no job runs.
      job = nullptr;
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      --pending_;
      if (background) {
        --background_running_;
        // Another thread may take the next background job (this one may take an urgent one).
        if (!jobs_.empty()) wake_.notify_one();
      }
      idle_.notify_all();
    }
  }

  static std::atomic<Pool*> existing;
  const pid_t owner_ = ::getpid();  // the process whose threads these are
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> urgent_, jobs_;
  int pending_ = 0;  // queued or running
  int running_ = 0;
  const int threads_;
  const int background_limit_;  // at most this many jobs that are not urgent run at once
  int background_running_ = 0;
  bool stopping_ = false;
};

std::atomic<Pool*> Pool::existing{nullptr};

// Exit runs the exiting thread's thread_local destructors before any atexit handler
// (glibc's __run_exit_handlers). Compiles must stop before NVRTC's own exit handlers run: a
// compile in flight then crashes in NVRTC's torn-down state (seen on an H100 host: 4 of 48
// exits of a GPU test whose background candidates were compiling crashed in
// nvrtcCompileProgram, and one hung). StopCompiles is also an
// atexit handler, registered again after each thread's first compile, but NVRTC registers
// handlers during a thread's first compile, so those of a first compile still in flight run
// before it. This guard, made on each thread that queues compiles, stops them first where
// that thread is the process's main thread, whose thread_local objects are destroyed only by
// exit; other threads' ending stops nothing.
class ExitGuard {
 public:
  ExitGuard() : main_(::getpid() == static_cast<pid_t>(::syscall(SYS_gettid))) {}
  ~ExitGuard() {
    if (main_) StopCompiles();
  }

 private:
  const bool main_;
};

}  // namespace

int CompileConcurrency() {
  // NVRTC holds a few hundred MB per compile in flight. Compiles in worker processes scale
  // with the cores (a thread here only waits on its worker's socket): one per core, up to 16.
  // Compiles in this process's threads slow each other down, and more threads buy little: a
  // handful, and some cores left to the caller.
  if (const std::optional<std::string> e = env::Get("TORCHFUSE_COMPILE_THREADS")) {
    return std::clamp(std::atoi(e->c_str()), 1, 64);
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return CompileWorkerPath().empty() ? std::clamp(cores / 2, 1, 8) : std::clamp(cores, 1, 16);
}

int BackgroundCompileConcurrency() {
  if (const std::optional<std::string> e = env::Get("TORCHFUSE_BACKGROUND_COMPILES")) {
    return std::clamp(std::atoi(e->c_str()), 1, 64);
  }
  return std::max(1, CompileConcurrency() / 4);
}

void SubmitCompile(std::function<void()> job, bool urgent) {
  static thread_local const ExitGuard guard;  // made on this thread's first pass here
  (void)guard;
  env::Snapshot();  // the variables as this thread sees them, for the pool's threads
  Pool::The()->Submit(std::move(job), urgent);
}

CompilePoolShape GetCompilePoolShape() { return Pool::The()->Shape(); }

int PendingCompiles() { return Pool::The()->Pending(); }

void WaitForCompiles() { Pool::The()->WaitIdle(); }

void StopCompiles() {
  if (Pool* p = Pool::Existing()) p->Stop();
}

}  // namespace torchfuse::codegen
