// Where a process's compile time goes: wall milliseconds summed per named phase (NVRTC,
// tuning, import and fusion, ...), for reports such as bench/first_call.py. Thread-safe; a
// phase timed on several threads at once sums their times.
#ifndef TORCHFUSE_COMMON_PHASE_TIMES_H_
#define TORCHFUSE_COMMON_PHASE_TIMES_H_

#include <chrono>
#include <map>
#include <string>

namespace torchfuse::phase {

/// Adds `ms` to `phase`'s total and one to its count.
void Add(const char* phase, double ms);

struct Total {
  double ms = 0;
  int64_t count = 0;
};
/// Every phase's total since the process started.
std::map<std::string, Total> Totals();

/// Times its own lifetime into `phase`.
class Scope {
 public:
  explicit Scope(const char* phase)
      : phase_(phase), start_(std::chrono::steady_clock::now()) {}
  ~Scope() {
    Add(phase_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          start_)
                    .count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

/// Whether TORCHFUSE_HOST_TIMES is set (and not "0"): the per-call host work of a compiled
/// graph (each node's launch or torch call, and the whole call) is then timed into the phase
/// totals under names that start with "host: ".
bool HostTimesOn();

}  // namespace torchfuse::phase

#endif  // TORCHFUSE_COMMON_PHASE_TIMES_H_
