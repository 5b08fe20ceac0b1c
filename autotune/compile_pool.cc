#include "autotune/compile_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace torchfuse::autotune {
namespace {

class Pool {
 public:
  Pool() {
    // NVRTC holds a few hundred MB per compile in flight: a handful of threads, and some
    // cores left to the caller.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int n = std::clamp(cores / 2, 1, 8);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
    // Joined before other statics (NVRTC's among them) go away.
    std::atexit([] { TheOrNull()->Stop(); });
  }

  static Pool* TheOrNull() {
    static Pool* const pool = new Pool();  // never destroyed: its threads are joined at exit
    return pool;
  }

  void Submit(std::function<void()> job, bool urgent) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      (urgent ? urgent_ : jobs_).push_back(std::move(job));
      ++pending_;
    }
    wake_.notify_one();
  }

  int Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_;
  }

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0 || stopping_; });
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stopping_ || !urgent_.empty() || !jobs_.empty(); });
        if (stopping_) return;
        std::deque<std::function<void()>>& from = urgent_.empty() ? jobs_ : urgent_;
        job = std::move(from.front());
        from.pop_front();
      }
      job();
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) idle_.notify_all();
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      pending_ -= static_cast<int>(urgent_.size() + jobs_.size());
      urgent_.clear();
      jobs_.clear();
    }
    wake_.notify_all();
    idle_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> urgent_, jobs_;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

void SubmitCompile(std::function<void()> job, bool urgent) {
  Pool::TheOrNull()->Submit(std::move(job), urgent);
}

int PendingCompiles() { return Pool::TheOrNull()->Pending(); }

void WaitForCompiles() { Pool::TheOrNull()->WaitIdle(); }

}  // namespace torchfuse::autotune
