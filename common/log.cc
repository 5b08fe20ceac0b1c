#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env.h"

namespace torchfuse::log {
namespace {

struct State {
  std::mutex mu;
  Sink sink;
  std::set<std::string> once;
  Progress* progress = nullptr;
};

State& GetState() {
  static State* s = new State;  // never destroyed: compile threads may log during exit
  return *s;
}

}  // namespace

void SetSink(Sink sink) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

Level StderrLevel() {
  const std::optional<std::string> v = env::Get("TORCHFUSE_LOG");
  if (!v.has_value()) return Level::kWarning;
  const std::string level = absl::AsciiStrToLower(*v);
  if (level == "debug") return Level::kDebug;
  if (level == "info") return Level::kInfo;
  if (level == "error") return Level::kError;
  return Level::kWarning;
}

void Write(Level level, const std::string& text) {
  Sink sink;
  {
    State& s = GetState();
    std::lock_guard<std::mutex> lock(s.mu);
    sink = s.sink;
  }
  if (sink) {
    sink(level, text);
  } else if (level >= StderrLevel()) {
    std::fprintf(stderr, "torchfuse: %s\n", text.c_str());
  }
}

void WarningOnce(const std::string& text) {
  {
    State& s = GetState();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.once.insert(text).second) return;
  }
  Warning(text);
}

Progress::Progress(std::string job, int total) : job_(std::move(job)), total_(total) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.progress == nullptr) s.progress = this;
}

Progress::~Progress() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.progress == this) s.progress = nullptr;
  if (line_shown_) std::fprintf(stderr, "\n");
}

void Progress::Step(const std::string& kernel, const std::string& what, double ms) {
  std::string text;
  bool has_sink = false;
  Progress* p = nullptr;
  {
    State& s = GetState();
    std::lock_guard<std::mutex> lock(s.mu);
    p = s.progress;
    if (p == nullptr) return;
    ++p->done_;
    text = absl::StrCat(p->job_, ": kernel ", p->done_,
                        p->total_ > 0 ? absl::StrCat("/", p->total_) : std::string(), " ",
                        kernel, "... ", what, absl::StrFormat(" in %.0f ms", ms));
    has_sink = static_cast<bool>(s.sink);
    // A terminal gets one line, overwritten at each step, unless info messages print anyway.
    if (::isatty(2) == 1 && (has_sink || StderrLevel() > Level::kInfo)) {
      std::fprintf(stderr, "\r\033[Ktorchfuse: %s", text.c_str());
      std::fflush(stderr);
      p->line_shown_ = true;
    }
  }
  Info(text);
}

}  // namespace torchfuse::log
