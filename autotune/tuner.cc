#include "autotune/tuner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/env.h"
#include "common/phase_times.h"
#include "common/status_macros.h"

namespace torchfuse::autotune {
namespace {

std::atomic<int64_t> tuning_runs{0};

double SteadyMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "tuning softmax: 5/12" on one terminal line, only for runs long enough to need it.
class Progress {
 public:
  Progress(const TuneConfig& c, std::string label, int total, double start)
      : config_(c), label_(std::move(label)), total_(total), start_(start),
        tty_(::isatty(2) == 1) {}
  ~Progress() {
    if (shown_) std::fprintf(stderr, "\n");
  }
  void Update(int done, double now) {
    if (!tty_ || now - start_ < config_.progress_after_ms) return;
    shown_ = true;
    std::fprintf(stderr, "\rtorchfuse: tuning %s: %d/%d variants, %.1f s", label_.c_str(), done,
                 total_, (now - start_) / 1000);
    std::fflush(stderr);
  }

 private:
  const TuneConfig& config_;
  const std::string label_;
  const int total_;
  const double start_;
  const bool tty_;
  bool shown_ = false;
};

// The runoff (TuneConfig::runoff_*): times the heuristic's variant and the first pass's
// nearest rivals in interleaved rounds and chooses again from those times.
absl::Status Runoff(Benchmark& bench, const TuneConfig& config, double left_ms,
                    TuneResult& result) {
  std::vector<std::pair<double, int>> timed;  // (weighted first-pass time, candidate)
  for (int i = 1; i < static_cast<int>(result.trials.size()); ++i) {
    const Trial& t = result.trials[i];
    if (t.error.empty() && t.ms >= 0) timed.push_back({t.ms * bench.Weight(i), i});
  }
  if (timed.empty() || config.runoff_rounds < 5 || config.runoff_size < 1) {
    return absl::OkStatus();
  }
  std::sort(timed.begin(), timed.end());
  const double fastest = std::min(timed.front().first, result.trials[0].ms * bench.Weight(0));
  std::vector<int> which = {0};
  for (const auto& [weighted, i] : timed) {
    if (weighted > fastest * (1 + config.runoff_window)) break;
    if (static_cast<int>(which.size()) > config.runoff_size) break;
    which.push_back(i);
  }
  if (which.size() < 2) return absl::OkStatus();
  double round_ms = 0;  // a round's time, from the first pass, with an L2 flush a run
  for (int i : which) round_ms += 2 * result.trials[i].ms;
  const int rounds = static_cast<int>(
      std::min<double>(config.runoff_rounds, left_ms / std::max(round_ms, 1e-3)));
  if (rounds < 5) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(const std::vector<double> ms, bench.TimeRoundsMs(which, rounds));
  if (ms.size() != which.size()) return absl::InternalError("runoff: a time per candidate");
  // The fastest weighted time; over the heuristic's variant (which[0]) only by the margin.
  size_t best = 0;
  for (size_t k = 1; k < which.size(); ++k) {
    if (ms[k] * bench.Weight(which[k]) < ms[best] * bench.Weight(which[best])) best = k;
  }
  if (best != 0 && ms[best] * bench.Weight(which[best]) >=
                       ms[0] * bench.Weight(0) * (1 - config.runoff_margin)) {
    best = 0;
  }
  for (size_t k = 0; k < which.size(); ++k) result.trials[which[k]].ms = ms[k];
  result.chosen = which[best];
  result.ms = ms[best];
  result.runoff_rounds = rounds;
  result.runoff_candidates = static_cast<int>(which.size());
  return absl::OkStatus();
}

}  // namespace

double Median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

absl::StatusOr<std::vector<double>> Benchmark::TimeRoundsMs(const std::vector<int>& which,
                                                            int rounds) {
  std::vector<std::vector<double>> samples(which.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < which.size(); ++k) {
      const size_t at = (k + r) % which.size();
      TF_ASSIGN_OR_RETURN(const double ms, TimeMs(which[at], 1));
      samples[at].push_back(ms);
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& s : samples) medians.push_back(Median(std::move(s)));
  return medians;
}

TuneConfig TuneConfigFrom(int options_budget_ms, const std::string& options_mode) {
  TuneConfig c;
  if (options_budget_ms >= 0) c.budget_ms = options_budget_ms;
  if (std::optional<std::string> b = env::Get("TORCHFUSE_TUNE_BUDGET_MS")) {
    double ms = 0;
    if (absl::SimpleAtod(*b, &ms) && ms >= 0) c.budget_ms = ms;
  }
  if (std::optional<std::string> w = env::Get("TORCHFUSE_TUNE_WAIT_MS")) {
    double ms = 0;
    if (absl::SimpleAtod(*w, &ms) && ms >= 0) c.wait_ms = ms;
  }
  if (std::optional<std::string> t = env::Get("TORCHFUSE_TUNE_TORCH")) {
    c.torch_candidate = *t != "0";
  }
  if (std::optional<std::string> m = env::Get("TORCHFUSE_TUNE_TORCH_MARGIN")) {
    double margin = 0;
    if (absl::SimpleAtod(*m, &margin) && margin > -1) c.torch_margin = margin;
  }
  const std::string t = env::GetOr("TORCHFUSE_TUNE", "");
  if (t == "0") c.enabled = false;
  const std::string mode = options_mode.empty() ? t : options_mode;
  // Lazy unless a mode is named: a first call that waits for no compile.
  if (mode == "sync") c.background = false;
  c.lazy = c.background && mode != "background";
  if (c.budget_ms <= 0) c.enabled = false;
  return c;
}

std::string TuneResult::TrialsText() const {
  std::vector<std::string> parts;
  for (const Trial& t : trials) {
    parts.push_back(t.error.empty() ? absl::StrFormat("%s=%.4f", t.variant, t.ms)
                                    : absl::StrCat(t.variant, "=", t.error));
  }
  return absl::StrJoin(parts, ";");
}

absl::StatusOr<TuneResult> Tune(Benchmark& bench, const std::vector<std::string>& candidates,
                                const TuneConfig& config, const std::string& label) {
  tuning_runs.fetch_add(1);
  phase::Scope timed("tune");
  const std::function<double()> now =
      config.now_ms ? config.now_ms : std::function<double()>(SteadyMs);
  const double start = now();
  const int n = static_cast<int>(candidates.size());
  if (n == 0) return absl::InvalidArgumentError("no candidates to tune");
  TuneResult result;
  for (const std::string& c : candidates) result.trials.push_back({c, -1, ""});

  // Compile in parallel: NVRTC takes most of a cold start, and it is thread-safe.
  std::vector<absl::Status> compiled(n);
  {
    std::atomic<int> next{0};
    auto work = [&] {
      for (int i = next++; i < n; i = next++) compiled[i] = bench.Compile(i);
    };
    const int threads =
        std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, std::min(n, 16));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }
  if (!compiled[0].ok()) return compiled[0];
  const double compiled_at = now();
  result.compile_ms = compiled_at - start;
  TF_RETURN_IF_ERROR(bench.Prepare());
  TF_RETURN_IF_ERROR(bench.RunReference());
  for (int i = 1; i < n; ++i) {
    if (!compiled[i].ok()) {
      result.trials[i].error = "compile failed";
    } else if (absl::Status s = bench.Check(i); !s.ok()) {
      result.trials[i].error = std::string(s.message());
    }
  }
  const double checked_at = now();
  result.check_ms = checked_at - compiled_at;
  // Repetitions from the reference's time, so that timing fits the budget that is left.
  TF_ASSIGN_OR_RETURN(const double first, bench.TimeMs(0, 3));
  int alive = 0;
  for (const Trial& t : result.trials) alive += t.error.empty();
  // The budget bounds timing: compilation (once per kernel and cache) is not counted.
  const double left = config.budget_ms - (now() - checked_at);
  const int reps = static_cast<int>(
      std::clamp(left / (std::max(first, 1e-3) * 1.5 * alive), 3.0, 25.0));
  Progress progress(config, label, n, start);
  double best = 0;  // the chosen candidate's weighted time
  for (int i = 0; i < n; ++i) {
    Trial& t = result.trials[i];
    if (!t.error.empty()) continue;
    if (i > 0 && now() - checked_at > config.budget_ms) {
      t.error = "budget spent";
      continue;
    }
    auto ms = bench.TimeMs(i, reps);
    if (!ms.ok()) {
      if (i == 0) return ms.status();
      t.error = std::string(ms.status().message());
      continue;
    }
    t.ms = *ms;
    const double weighted = t.ms * bench.Weight(i);
    if (result.ms < 0 || weighted < best * (1 - config.variant_margin)) {
      best = weighted;
      result.ms = t.ms;
      result.chosen = i;
    }
    progress.Update(i + 1, now());
  }
  // A runoff that fails leaves the first pass's choice, and says why in the result.
  if (absl::Status s = Runoff(bench, config, config.budget_ms - (now() - checked_at), result);
      !s.ok()) {
    result.runoff_error = std::string(s.message());
  }
  result.elapsed_ms = now() - start;
  result.timing_ms = result.elapsed_ms - (checked_at - start);
  return result;
}

int64_t TuningRunCount() { return tuning_runs.load(); }

}  // namespace torchfuse::autotune
