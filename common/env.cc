#include "common/env.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

#include <pthread.h>

namespace torchfuse::env {
namespace {

thread_local bool own_thread = false;

// Every variable torchfuse reads, so that a snapshot has each one its threads may read.
constexpr const char* kVariables[] = {
    "TORCHFUSE_BACKGROUND_COMPILES", "TORCHFUSE_CACHE",         "TORCHFUSE_CACHE_DIR",
    "TORCHFUSE_COLUMN_VARIANT",      "TORCHFUSE_COMPILE_THREADS", "TORCHFUSE_COMPILE_WORKERS",
    "TORCHFUSE_DUMP",                "TORCHFUSE_DUMP_DIR",      "TORCHFUSE_HOST_TIMES",
    "TORCHFUSE_LOG",                 "TORCHFUSE_MATMUL_EPILOGUE", "TORCHFUSE_NVRTC_WORKER",
    "TORCHFUSE_ROW_STRATEGY",        "TORCHFUSE_SYNC_LAUNCHES", "TORCHFUSE_TUNE",
    "TORCHFUSE_TUNE_BUDGET_MS",      "TORCHFUSE_TUNE_TORCH",    "TORCHFUSE_TUNE_TORCH_MARGIN",
    "TORCHFUSE_TUNE_WAIT_MS",        "TORCHFUSE_WARM_NVRTC",    "CUDA_LAUNCH_BLOCKING",
    "HOME",                          "TMPDIR",                  "XDG_CACHE_HOME",
};

struct Values {
  std::mutex mu;
  std::map<std::string, std::optional<std::string>> last;  // as a program's thread read it
};

// A Reading waits this long after the last change, so that a burst of changes (unsetting and
// setting every variable, as mock.patch.dict does) waits for compiles in flight once, not once
// per variable.
constexpr std::chrono::milliseconds kQuietAfterChange{5};

// Readings and changes of the environment (Reading, Set, Unset): changes first.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int readers = 0;
  int changes_waiting = 0;
  bool changing = false;
  std::chrono::steady_clock::time_point quiet_from{};  // the last change's end + kQuietAfterChange
};

thread_local int reading_depth = 0;

// Never destroyed (compile threads run at exit); replaced in a fork's child, where the threads
// that held their locks or Readings do not exist.
Values* values = nullptr;
Gate* gate = nullptr;

void BeforeFork() {
  values->mu.lock();
  gate->mu.lock();
}

void AfterForkInParent() {
  gate->mu.unlock();
  values->mu.unlock();
}

void AfterForkInChild() {
  // Only the forking thread runs here: a Reading is held only where it held one.
  auto* fresh_values = new Values();
  fresh_values->last = values->last;
  auto* fresh_gate = new Gate();
  fresh_gate->readers = reading_depth > 0 ? 1 : 0;
  values = fresh_values;
  gate = fresh_gate;
}

void Make() {
  static const bool made = [] {
    values = new Values();
    gate = new Gate();
    ::pthread_atfork(BeforeFork, AfterForkInParent, AfterForkInChild);
    return true;
  }();
  (void)made;
}

Values& TheValues() {
  Make();
  return *values;
}

Gate& TheGate() {
  Make();
  return *gate;
}

// Runs `change` once no Reading is held; returns its errno.
template <typename Change>
int Changed(Change change) {
  if (reading_depth > 0) return EDEADLK;  // it would wait for this thread's own Reading
  Gate& g = TheGate();
  {
    std::unique_lock<std::mutex> lock(g.mu);
    ++g.changes_waiting;
    g.cv.wait(lock, [&] { return g.readers == 0 && !g.changing; });
    --g.changes_waiting;
    g.changing = true;
  }
  errno = 0;
  const int err = change() == 0 ? 0 : errno;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.changing = false;
    g.quiet_from = std::chrono::steady_clock::now() + kQuietAfterChange;
  }
  g.cv.notify_all();
  return err;
}

std::optional<std::string> ReadNow(const char* name) {
  const Reading reading;
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace

std::optional<std::string> Get(const char* name) {
  Values& values = TheValues();
  if (!own_thread) {
    std::optional<std::string> v = ReadNow(name);
    std::lock_guard<std::mutex> lock(values.mu);
    values.last[name] = v;
    return v;
  }
  std::lock_guard<std::mutex> lock(values.mu);
  auto it = values.last.find(name);
  return it == values.last.end() ? std::nullopt : it->second;
}

std::string GetOr(const char* name, const std::string& fallback) {
  std::optional<std::string> v = Get(name);
  return v.has_value() && !v->empty() ? *v : fallback;
}

Reading::Reading() {
  if (reading_depth++ > 0) return;
  Gate& g = TheGate();
  std::unique_lock<std::mutex> lock(g.mu);
  for (;;) {
    if (g.changing || g.changes_waiting > 0) {
      g.cv.wait(lock);
    } else if (std::chrono::steady_clock::now() < g.quiet_from) {
      g.cv.wait_until(lock, g.quiet_from);
    } else {
      break;
    }
  }
  ++g.readers;
}

Reading::~Reading() {
  if (--reading_depth > 0) return;
  Gate& g = TheGate();
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    last = --g.readers == 0;
  }
  if (last) g.cv.notify_all();
}

int Set(const std::string& name, const std::string& value) {
  return Changed([&] { return ::setenv(name.c_str(), value.c_str(), 1); });
}

int Unset(const std::string& name) {
  return Changed([&] { return ::unsetenv(name.c_str()); });
}

std::vector<std::string> SnapshotVariables() {
  return std::vector<std::string>(std::begin(kVariables), std::end(kVariables));
}

int ChangesWaiting() {
  Gate& g = TheGate();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.changes_waiting;
}

int ReadingsHeld() {
  Gate& g = TheGate();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.readers;
}

void Snapshot() {
  if (own_thread) return;
  std::map<std::string, std::optional<std::string>> now;
  {
    const Reading reading;  // one wait for all of them
    for (const char* name : kVariables) now[name] = ReadNow(name);
  }
  Values& values = TheValues();
  std::lock_guard<std::mutex> lock(values.mu);
  for (auto& [name, value] : now) values.last[name] = std::move(value);
}

void MarkOwnThread() { own_thread = true; }

bool OnOwnThread() { return own_thread; }

}  // namespace torchfuse::env
