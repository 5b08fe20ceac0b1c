#include "autotune/tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

namespace torchfuse::autotune {
namespace {

// Candidates with given times and failures, on an injected clock that each timed run moves. With
// `drift_`, every time measured is scaled by 1 + drift_ * clock: a GPU whose clocks sag as it
// runs, so that candidates timed later read slower.
class FakeBenchmark : public Benchmark {
 public:
  explicit FakeBenchmark(std::vector<double> ms) : ms_(std::move(ms)) {}
  absl::Status Compile(int i) override {
    std::lock_guard<std::mutex> lock(mu_);
    compiled_.insert(i);
    clock_ += compile_ms_;
    return compile_fails_.count(i) ? absl::InvalidArgumentError("nvrtc") : absl::OkStatus();
  }
  absl::Status Prepare() override { return absl::OkStatus(); }
  absl::Status RunReference() override {
    reference_runs_++;
    return absl::OkStatus();
  }
  absl::Status Check(int i) override {
    checked_.insert(i);
    return wrong_.count(i) ? absl::InternalError("12 outputs differ") : absl::OkStatus();
  }
  absl::StatusOr<double> TimeMs(int i, int reps) override {
    timed_[i] = std::max(timed_[i], reps);
    const double measured = ms_[i] * (1 + drift_ * clock_);
    clock_ += ms_[i] * (reps + 1);
    if (launch_fails_.count(i) || (reps == 1 && runoff_fails_)) {
      return absl::InternalError("too many resources requested");
    }
    return measured;
  }
  absl::StatusOr<std::vector<double>> TimeRoundsMs(const std::vector<int>& which,
                                                   int rounds) override {
    runoff_ = which;
    runoff_rounds_ = rounds;
    return Benchmark::TimeRoundsMs(which, rounds);
  }
  double Weight(int i) const override {
    auto w = weights_.find(i);
    return w == weights_.end() ? 1.0 : w->second;
  }
  double Now() const { return clock_; }
  std::map<int, double> weights_;

  std::vector<double> ms_;
  std::set<int> compile_fails_, wrong_, launch_fails_;
  std::set<int> compiled_, checked_;
  std::map<int, int> timed_;  // the most repetitions a candidate was timed with at once
  std::vector<int> runoff_;   // the candidates of the runoff, in its order
  int runoff_rounds_ = 0;
  bool runoff_fails_ = false;
  double drift_ = 0;
  int reference_runs_ = 0;
  double compile_ms_ = 0;
  double clock_ = 0;
  std::mutex mu_;
};

TuneConfig Config(FakeBenchmark* b, double budget_ms) {
  TuneConfig c;
  c.budget_ms = budget_ms;
  c.now_ms = [b] { return b->Now(); };
  return c;
}

const std::vector<std::string> kNames = {"ref", "a", "b", "c", "d"};

TEST(TunerTest, PicksTheFastestCandidate) {
  FakeBenchmark b({1.0, 0.9, 0.4, 0.7, 1.2});
  auto r = Tune(b, kNames, Config(&b, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 2);
  EXPECT_DOUBLE_EQ(r->ms, 0.4);
  EXPECT_EQ(b.compiled_.size(), 5u);
  EXPECT_EQ(b.reference_runs_, 1);
  EXPECT_EQ(b.checked_, (std::set<int>{1, 2, 3, 4}));
  EXPECT_EQ(r->trials.size(), 5u);
  EXPECT_EQ(r->TrialsText(), "ref=1.0000;a=0.9000;b=0.4000;c=0.7000;d=1.2000");
}

TEST(TunerTest, DropsCandidatesThatFailToCompileLaunchOrAgree) {
  FakeBenchmark b({1.0, 0.1, 0.2, 0.3, 0.5});
  b.compile_fails_ = {1};
  b.wrong_ = {2};
  b.launch_fails_ = {3};
  auto r = Tune(b, kNames, Config(&b, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 4);
  EXPECT_EQ(r->trials[1].error, "compile failed");
  EXPECT_EQ(r->trials[2].error, "12 outputs differ");
  EXPECT_EQ(r->trials[3].error, "too many resources requested");
  EXPECT_EQ(b.timed_.count(1), 0u);
  EXPECT_EQ(b.timed_.count(2), 0u);
}

TEST(TunerTest, ReferenceThatDoesNotCompileIsAnError) {
  FakeBenchmark b({1.0, 0.5});
  b.compile_fails_ = {0};
  EXPECT_FALSE(Tune(b, {"ref", "a"}, Config(&b, 1e6), "k").ok());
}

TEST(TunerTest, BudgetBoundsTheRepetitionsAndTheCandidatesTimed) {
  // 10 ms per run, a 100 ms budget: a few repetitions, and not every candidate gets timed.
  FakeBenchmark b({10, 10, 10, 10, 10});
  auto r = Tune(b, kNames, Config(&b, 100), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 0);
  for (const auto& [i, reps] : b.timed_) EXPECT_EQ(reps, 3) << i;  // the floor
  int skipped = 0;
  for (const Trial& t : r->trials) skipped += t.error == "budget spent";
  EXPECT_GT(skipped, 0);
  // A large budget times every candidate, with more repetitions.
  FakeBenchmark big({0.01, 0.01, 0.01, 0.01, 0.01});
  ASSERT_TRUE(Tune(big, kNames, Config(&big, 1000), "k").ok());
  EXPECT_EQ(big.timed_.size(), 5u);
  EXPECT_EQ(big.timed_[4], 25);
}

TEST(TunerTest, CompilationDoesNotSpendTheBudget) {
  // 21 candidates that take 500 ms each to compile (10.5 s in all, past a 1 s budget) and
  // 1 ms a run: each is still timed, and the fastest, the last, chosen.
  std::vector<double> ms(21, 1.0);
  ms.back() = 0.5;
  std::vector<std::string> names;
  for (size_t i = 0; i < ms.size(); ++i) names.push_back("v" + std::to_string(i));
  FakeBenchmark b(ms);
  b.compile_ms_ = 500;
  auto r = Tune(b, names, Config(&b, 1000), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(b.timed_.size(), ms.size());
  EXPECT_EQ(r->chosen, static_cast<int>(ms.size()) - 1);
  EXPECT_GE(r->compile_ms, 10000);
}

TEST(TunerTest, AWeightedCandidateWinsOnlyByItsMargin) {
  // Candidate 2 (a group's torch ops, say) weighs 1.05: 3 % faster than the best kernel is
  // not enough, 10 % faster is; its time is reported as measured.
  FakeBenchmark close({1.0, 0.9, 0.873, 1.1});
  close.weights_ = {{2, 1.05}};
  auto r = Tune(close, {"ref", "a", "torch", "c"}, Config(&close, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 1);
  EXPECT_DOUBLE_EQ(r->ms, 0.9);
  EXPECT_DOUBLE_EQ(r->trials[2].ms, 0.873);
  FakeBenchmark clear({1.0, 0.9, 0.81, 1.1});
  clear.weights_ = {{2, 1.05}};
  r = Tune(clear, {"ref", "a", "torch", "c"}, Config(&clear, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 2);
  EXPECT_DOUBLE_EQ(r->ms, 0.81);
  // A weight below 1 favours its candidate.
  FakeBenchmark favoured({1.0, 0.9, 1.2});
  favoured.weights_ = {{2, 0.5}};
  r = Tune(favoured, {"ref", "a", "torch"}, Config(&favoured, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 2);
}

TEST(TunerTest, ACandidateWithinTheNoiseMarginKeepsTheEarlierOne) {
  // The first pass alone (no runoff): 1 % and 1.5 % faster than the heuristic's variant is a
  // tie, the heuristic's stays; 5 % faster wins, and a later candidate within 2 % of it does
  // not displace it.
  auto first_pass = [](FakeBenchmark* b) {
    TuneConfig c = Config(b, 1e6);
    c.runoff_rounds = 0;
    return c;
  };
  FakeBenchmark near({1.0, 0.99, 0.985});
  auto r = Tune(near, {"ref", "a", "b"}, first_pass(&near), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 0);
  EXPECT_EQ(r->runoff_rounds, 0);
  EXPECT_TRUE(near.runoff_.empty());
  FakeBenchmark clear({1.0, 0.95, 0.94, 0.9});
  r = Tune(clear, {"ref", "a", "b", "c"}, first_pass(&clear), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 3);
  FakeBenchmark later({1.0, 0.95, 0.94});
  r = Tune(later, {"ref", "a", "b"}, first_pass(&later), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 1);
  EXPECT_DOUBLE_EQ(r->ms, 0.95);
  // With the runoff, the heuristic's variant keeps within its margin (1 %), and the fastest of
  // the others wins with none.
  FakeBenchmark tie({1.0, 0.995, 0.992});
  r = Tune(tie, {"ref", "a", "b"}, Config(&tie, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 0);
  EXPECT_EQ(tie.runoff_, (std::vector<int>{0, 2, 1}));
  FakeBenchmark rivals({1.0, 0.95, 0.94});
  r = Tune(rivals, {"ref", "a", "b"}, Config(&rivals, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 2);
  EXPECT_DOUBLE_EQ(r->ms, 0.94);
}

TEST(TunerTest, TheRunoffSettlesWhatTheClocksDriftHid) {
  // "a" is 3 % faster than the heuristic's variant, but the GPU slows as it runs: timed after
  // it, "a" reads slower, and the first pass keeps the heuristic's. Timed in interleaved
  // rounds, both drift alike, and "a" wins. "b" (20 % slower) is left out of the runoff.
  FakeBenchmark b({1.0, 0.97, 1.2});
  b.drift_ = 0.002;
  TuneConfig first_pass = Config(&b, 1e6);
  first_pass.runoff_rounds = 0;
  auto r = Tune(b, {"ref", "a", "b"}, first_pass, "k");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->chosen, 0) << r->TrialsText();  // the drift is large enough to hide "a"
  FakeBenchmark again({1.0, 0.97, 1.2});
  again.drift_ = 0.002;
  r = Tune(again, {"ref", "a", "b"}, Config(&again, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(again.runoff_, (std::vector<int>{0, 1}));
  EXPECT_EQ(r->runoff_candidates, 2);
  EXPECT_EQ(r->runoff_rounds, 20);
  EXPECT_EQ(r->chosen, 1) << r->TrialsText();
  EXPECT_DOUBLE_EQ(r->ms, r->trials[1].ms);  // the runoff's time
  EXPECT_LT(r->trials[1].ms, r->trials[0].ms);
}

TEST(TunerTest, TheRunoffFitsTheBudgetOrDoesNotRun) {
  // Rivals within the window, 1 ms a run; the runoff's round costs ~4 ms (an L2 flush a run).
  // A 50 ms budget: the first pass takes ~36 (15 repetitions each, warm-ups, the reference's
  // first timing), and the ~14 left make fewer than 5 rounds: no runoff. A larger budget runs it.
  FakeBenchmark tight({1.0, 0.98});
  auto r = Tune(tight, {"ref", "a"}, Config(&tight, 50), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->runoff_rounds, 0);
  EXPECT_TRUE(tight.runoff_.empty());
  FakeBenchmark roomy({1.0, 0.98});
  r = Tune(roomy, {"ref", "a"}, Config(&roomy, 100), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->runoff_rounds, 5);
  EXPECT_LT(r->runoff_rounds, 20);
  EXPECT_EQ(roomy.runoff_, (std::vector<int>{0, 1}));
  // At most runoff_size rivals besides the heuristic's, the fastest first.
  FakeBenchmark many({1.0, 0.99, 0.98, 0.97, 0.96, 0.955, 0.5});
  TuneConfig c = Config(&many, 1e6);
  c.runoff_size = 2;
  c.runoff_window = 1.0;
  r = Tune(many, {"ref", "a", "b", "c", "d", "e", "f"}, c, "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(many.runoff_, (std::vector<int>{0, 6, 5}));
  EXPECT_EQ(r->chosen, 6);
  // A runoff that fails keeps the first pass's choice and says why.
  FakeBenchmark failing({1.0, 0.9});
  failing.runoff_fails_ = true;
  r = Tune(failing, {"ref", "a"}, Config(&failing, 1e6), "k");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chosen, 1);
  EXPECT_DOUBLE_EQ(r->ms, 0.9);
  EXPECT_EQ(r->runoff_rounds, 0);
  EXPECT_EQ(r->runoff_error, "too many resources requested");
}

TEST(TunerTest, ConfigFollowsOptionsAndEnvironment) {
  ::unsetenv("TORCHFUSE_TUNE");
  ::unsetenv("TORCHFUSE_TUNE_BUDGET_MS");
  EXPECT_TRUE(TuneConfigFrom(-1).enabled);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(-1).budget_ms, 1000);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(250).budget_ms, 250);
  EXPECT_FALSE(TuneConfigFrom(0).enabled);
  ::setenv("TORCHFUSE_TUNE_BUDGET_MS", "40", 1);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(250).budget_ms, 40);
  ::setenv("TORCHFUSE_TUNE", "0", 1);
  EXPECT_FALSE(TuneConfigFrom(-1).enabled);
  ::unsetenv("TORCHFUSE_TUNE");
  ::unsetenv("TORCHFUSE_TUNE_BUDGET_MS");
  // The mode: lazy by default (background, torch ops until the heuristic's kernel
  // compiles), sync, or background.
  EXPECT_TRUE(TuneConfigFrom(-1).background);
  EXPECT_TRUE(TuneConfigFrom(-1).lazy);
  EXPECT_FALSE(TuneConfigFrom(-1, "sync").background);
  EXPECT_FALSE(TuneConfigFrom(-1, "sync").lazy);
  EXPECT_TRUE(TuneConfigFrom(-1, "background").background);
  EXPECT_FALSE(TuneConfigFrom(-1, "background").lazy);
  EXPECT_TRUE(TuneConfigFrom(-1, "lazy").background);
  EXPECT_TRUE(TuneConfigFrom(-1, "lazy").lazy);
  ::setenv("TORCHFUSE_TUNE", "background", 1);
  EXPECT_FALSE(TuneConfigFrom(-1).lazy);
  EXPECT_TRUE(TuneConfigFrom(-1, "lazy").lazy);  // Options win over the environment
  ::setenv("TORCHFUSE_TUNE", "sync", 1);
  EXPECT_FALSE(TuneConfigFrom(-1).background);
  EXPECT_FALSE(TuneConfigFrom(-1).lazy);
  ::setenv("TORCHFUSE_TUNE", "lazy", 1);
  EXPECT_TRUE(TuneConfigFrom(-1).lazy);
  EXPECT_FALSE(TuneConfigFrom(-1, "background").lazy);
  EXPECT_FALSE(TuneConfigFrom(-1, "sync").lazy);
  // A value that names no mode (tuning on) leaves the default.
  ::setenv("TORCHFUSE_TUNE", "1", 1);
  EXPECT_TRUE(TuneConfigFrom(-1).enabled);
  EXPECT_TRUE(TuneConfigFrom(-1).lazy);
  ::unsetenv("TORCHFUSE_TUNE");
}

TEST(TunerTest, TorchCandidateFollowsTheEnvironment) {
  ::unsetenv("TORCHFUSE_TUNE_TORCH");
  ::unsetenv("TORCHFUSE_TUNE_TORCH_MARGIN");
  EXPECT_TRUE(TuneConfigFrom(-1).torch_candidate);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(-1).torch_margin, 0.05);
  ::setenv("TORCHFUSE_TUNE_TORCH", "0", 1);
  EXPECT_FALSE(TuneConfigFrom(-1).torch_candidate);
  ::setenv("TORCHFUSE_TUNE_TORCH", "1", 1);
  EXPECT_TRUE(TuneConfigFrom(-1).torch_candidate);
  ::setenv("TORCHFUSE_TUNE_TORCH_MARGIN", "-0.5", 1);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(-1).torch_margin, -0.5);
  ::setenv("TORCHFUSE_TUNE_TORCH_MARGIN", "-1", 1);  // would make torch's time 0: ignored
  EXPECT_DOUBLE_EQ(TuneConfigFrom(-1).torch_margin, 0.05);
  ::setenv("TORCHFUSE_TUNE_TORCH_MARGIN", "lots", 1);
  EXPECT_DOUBLE_EQ(TuneConfigFrom(-1).torch_margin, 0.05);
  ::unsetenv("TORCHFUSE_TUNE_TORCH");
  ::unsetenv("TORCHFUSE_TUNE_TORCH_MARGIN");
}

}  // namespace
}  // namespace torchfuse::autotune
