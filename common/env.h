// Environment variables, read without racing the program's changes to them.
//
// getenv walks the array that setenv, putenv and unsetenv grow, shrink and free. A thread
// reading a variable while another thread rewrites the environment can read freed memory and
// crash: Python's mock.patch.dict(os.environ, ...) unsets and sets every variable as it exits,
// and on glibc 2.36 two threads calling getenv crashed within seconds of a loop doing that.
// torchfuse's own threads (the compile pool's) run while the program's threads run Python, so
// they never call getenv: they read the values that the program's threads saw last, taken
// whenever one of those threads reads a variable here and whenever it hands work to torchfuse's
// threads (Snapshot). Every variable torchfuse reads is read through Get.
//
// NVRTC reads about ten variables in each compile, on whichever thread compiles. A compile, and
// each read here, holds a Reading; Set and Unset wait until no Reading is held (and a Reading
// asked for meanwhile waits for them, and for 5 ms after the last change, so that a burst of
// changes waits for the compiles in flight once). The Python package routes os.environ's changes (os.putenv,
// os.unsetenv) through Set and Unset, so that no change of Python's lands in a compile.
#ifndef TORCHFUSE_COMMON_ENV_H_
#define TORCHFUSE_COMMON_ENV_H_

#include <optional>
#include <string>
#include <vector>

namespace torchfuse::env {

/// The variable's value, nullopt where it is unset. On the program's threads: read now (and
/// kept for torchfuse's threads). On torchfuse's own threads (MarkOwnThread): the value a
/// program's thread read last, never getenv.
std::optional<std::string> Get(const char* name);

/// Get(name), or `fallback` where it is unset or empty.
std::string GetOr(const char* name, const std::string& fallback);

/// On a program's thread: reads every variable torchfuse reads (env.cc's list), for its own
/// threads. Nothing on torchfuse's own threads.
void Snapshot();

/// Held while code that reads the environment runs (an NVRTC compile; Get and Snapshot hold one
/// themselves). Nested Readings on one thread wait for nothing.
class Reading {
 public:
  Reading();
  ~Reading();
  Reading(const Reading&) = delete;
  Reading& operator=(const Reading&) = delete;
};

/// setenv(name, value) and unsetenv(name), once no Reading is held; 0 or the errno they set
/// (EDEADLK, changing nothing, on a thread that holds a Reading: it would wait for itself).
int Set(const std::string& name, const std::string& value);
int Unset(const std::string& name);

/// The variables a Snapshot reads: every variable torchfuse reads.
std::vector<std::string> SnapshotVariables();

/// Changes waiting for Readings to end, and Readings held (for tests).
int ChangesWaiting();
int ReadingsHeld();

/// Marks the calling thread as one of torchfuse's own for the rest of its life.
void MarkOwnThread();

/// Whether the calling thread is one of torchfuse's own.
bool OnOwnThread();

}  // namespace torchfuse::env

#endif  // TORCHFUSE_COMMON_ENV_H_
