// The autotuner: compile every candidate variant, drop those that fail or disagree with the
// reference, time the rest, keep the fastest, all within a time budget.
#ifndef TORCHFUSE_AUTOTUNE_TUNER_H_
#define TORCHFUSE_AUTOTUNE_TUNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torchfuse::autotune {

/// What the tuner needs of the kernels it tunes. Candidate 0 is the reference (the heuristic's
/// variant): its output is what the others must reproduce.
class Benchmark {
 public:
  virtual ~Benchmark() = default;
  /// Compiles candidate `i`. Called from several threads at once, each with its own `i`.
  virtual absl::Status Compile(int i) = 0;
  /// After every Compile: prepares to run (loads kernels, allocates buffers). Single-threaded,
  /// as are the calls below.
  virtual absl::Status Prepare() = 0;
  /// Runs the reference once and keeps its outputs.
  virtual absl::Status RunReference() = 0;
  /// Runs candidate `i` once and compares its outputs with the reference's.
  virtual absl::Status Check(int i) = 0;
  /// The median time in ms of `reps` runs of candidate `i` (after a warm-up run).
  virtual absl::StatusOr<double> TimeMs(int i, int reps) = 0;
  /// The median time in ms of each candidate in `which` over `rounds` interleaved rounds: a
  /// round runs each of them once, starting at a different one each round, so that a drift of
  /// clocks or memory state over the rounds reaches them all alike. The default times one run
  /// at a time through TimeMs.
  virtual absl::StatusOr<std::vector<double>> TimeRoundsMs(const std::vector<int>& which,
                                                           int rounds);
  /// What candidate `i`'s time is multiplied by when the fastest is chosen (its time is
  /// reported as measured): above 1, it wins only by that margin.
  virtual double Weight(int i) const {
    (void)i;
    return 1.0;
  }
};

/// The median of `values` (not empty): the upper one of an even count's middle two.
double Median(std::vector<double> values);

/// How long tuning may take, and whether it runs at all.
struct TuneConfig {
  bool enabled = true;
  /// Deferred tuning: a kernel's first call runs its recorded or heuristic variant while the
  /// candidates compile in the background, and a later call times them and switches to the
  /// winner. Otherwise the first call compiles and times every candidate before it runs.
  bool background = true;
  /// Lazy tuning (background too): where no record decides, a kernel's first calls run its
  /// fusion group's own torch ops (its unfused form) while the heuristic's variant compiles,
  /// so that no call waits for NVRTC; the first call after it has compiled runs it, and the
  /// first call after every candidate has compiled times them and switches to the winner, as
  /// background tuning does. A group without torch ops, or whose heuristic's kernel this
  /// process has compiled already, runs the heuristic's variant from its first call, as
  /// background tuning does.
  bool lazy = false;
  /// Wall time per kernel for timing its candidates, from when they are compiled and checked:
  /// compiling a large space on a cold cache can take longer than the budget, and counting it
  /// left only the heuristic's variant timed.
  double budget_ms = 1000;
  /// How long a process waits for another's tuning of the same kernel (its record), or for
  /// the GPU that another process times candidates on; then it runs the heuristic's variant
  /// and records nothing. TORCHFUSE_TUNE_WAIT_MS.
  double wait_ms = 60000;
  /// Wall clock in ms; tests inject their own.
  std::function<double()> now_ms;
  /// Progress shown on stderr when it is a terminal and tuning takes longer than this.
  double progress_after_ms = 1000;
  /// A fusion group's own torch ops (its unfused form) are one more candidate: they run
  /// instead of a kernel when they are faster than the fastest variant by more than
  /// `torch_margin` (0.05: 5 %), so that timing noise keeps the fused kernel.
  /// TORCHFUSE_TUNE_TORCH=0 leaves them out; TORCHFUSE_TUNE_TORCH_MARGIN=x sets the margin
  /// (x > -1; a negative one favours torch's ops).
  bool torch_candidate = true;
  double torch_margin = 0.05;
  /// A candidate displaces the one chosen so far (the heuristic's first, then the earlier
  /// ones in the space's order) only when its weighted time is lower by more than this
  /// fraction: a tie within timing noise keeps the earlier one. (Two softmax variants timed
  /// 0.75 % apart in tuning measured 5-13 % apart, the other way, when the test timed them
  /// again.)
  double variant_margin = 0.02;
  /// The runoff: timed one after another, candidates drift with the GPU's clocks (the first
  /// pass above); the heuristic's variant and up to `runoff_size` others whose weighted times
  /// came within `runoff_window` of the fastest's are then timed again in interleaved rounds
  /// (Benchmark::TimeRoundsMs), as many as the budget left allows, up to `runoff_rounds`
  /// (fewer than 5: no runoff). The fastest there wins; over the heuristic's variant, only by
  /// more than `runoff_margin`.
  int runoff_rounds = 20;
  int runoff_size = 4;
  double runoff_window = 0.05;
  double runoff_margin = 0.01;
};

/// The configuration from Options (budget_ms < 0: not set there; mode "", "sync",
/// "background" or "lazy") and the environment: TORCHFUSE_TUNE=0 turns tuning off, =sync,
/// =background or =lazy sets the mode where Options do not (else lazy);
/// TORCHFUSE_TUNE_BUDGET_MS=N sets the budget (0: off); TORCHFUSE_TUNE_TORCH and
/// TORCHFUSE_TUNE_TORCH_MARGIN set the torch candidate.
TuneConfig TuneConfigFrom(int options_budget_ms, const std::string& options_mode = "");

/// One candidate's outcome.
struct Trial {
  std::string variant;
  double ms = -1;     // median time; < 0 when not timed
  std::string error;  // why it was dropped ("" when timed)
};

/// The outcome of a tuning run.
struct TuneResult {
  int chosen = 0;  // index into the candidates
  double ms = -1;
  std::vector<Trial> trials;
  double elapsed_ms = 0;
  /// Where the time went: compiling the candidates, preparing and checking them, timing them.
  double compile_ms = 0, check_ms = 0, timing_ms = 0;
  /// The runoff's rounds (0: none ran) and candidates, the heuristic's included; each one's
  /// trial holds its runoff time.
  int runoff_rounds = 0, runoff_candidates = 0;
  std::string runoff_error;  // why a runoff that started did not finish ("" if it did)
  /// The trials as "variant=ms" / "variant=error" joined by ';' (for records and listings).
  std::string TrialsText() const;
};

/// Tunes `candidates` (names, for reports; candidate 0 the reference) of kernel `label`.
/// Fails only when the reference itself cannot compile or run.
absl::StatusOr<TuneResult> Tune(Benchmark& bench, const std::vector<std::string>& candidates,
                                const TuneConfig& config, const std::string& label);

/// Tuning runs this process has made.
int64_t TuningRunCount();

}  // namespace torchfuse::autotune

#endif  // TORCHFUSE_AUTOTUNE_TUNER_H_
