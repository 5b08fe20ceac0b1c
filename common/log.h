// Messages: one sink for everything the library says (warnings, what it compiled and tuned,
// progress), so that the Python package can route them to its `logging` logger.
//
// Without a sink installed, messages at or above TORCHFUSE_LOG's level (debug, info, warning,
// error; default warning) go to stderr as "torchfuse: <text>". Nothing on a per-call path
// writes a message: they cost nothing when a model runs.
#ifndef TORCHFUSE_COMMON_LOG_H_
#define TORCHFUSE_COMMON_LOG_H_

#include <functional>
#include <string>

namespace torchfuse::log {

/// Python logging's level numbers.
enum class Level : int { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40 };

/// Receives every message, whatever its level (the receiver filters). Called on the thread that
/// writes the message, which may be a compile thread; it must not block on the caller.
using Sink = std::function<void(Level, const std::string&)>;

/// Installs `sink` for the process; an empty one restores stderr.
void SetSink(Sink sink);

/// The stderr threshold: TORCHFUSE_LOG, read on each call (common/env.h).
Level StderrLevel();

void Write(Level level, const std::string& text);
inline void Debug(const std::string& text) { Write(Level::kDebug, text); }
inline void Info(const std::string& text) { Write(Level::kInfo, text); }
inline void Warning(const std::string& text) { Write(Level::kWarning, text); }
/// A warning, once per process per distinct text.
void WarningOnce(const std::string& text);

/// Progress of a job over kernels ("precompile: kernel 3/17 tf_softmax... tuned in 120 ms").
/// Each step is an info message; on a terminal (stderr a tty) each also overwrites one stderr
/// line, so that a long precompile shows where it is and a pipe stays quiet. One job at a time;
/// steps reported while none is active are dropped.
class Progress {
 public:
  Progress(std::string job, int total);  // total <= 0: unknown
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  /// A kernel finished: `what` it went through ("tuned", "compiled", "from the cache").
  static void Step(const std::string& kernel, const std::string& what, double ms);

 private:
  std::string job_;
  int total_;
  int done_ = 0;
  bool line_shown_ = false;
};

}  // namespace torchfuse::log

#endif  // TORCHFUSE_COMMON_LOG_H_
