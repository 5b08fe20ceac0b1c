// Which variant of a kernel runs: a recorded decision, a fresh tuning run, or the heuristic.
#ifndef TORCHFUSE_RUNTIME_KERNEL_CHOICE_H_
#define TORCHFUSE_RUNTIME_KERNEL_CHOICE_H_

#include <ATen/ATen.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autotune/kernel_bench.h"
#include "autotune/tuner.h"
#include "cache/disk_cache.h"
#include "cache/locks.h"
#include "codegen_nvrtc/indexing.h"

namespace torchfuse::runtime {

/// The candidate that runs a fusion group's own torch ops instead of a kernel
/// (autotune::LaunchCandidate::torch); the tuner times it beside the kernels' variants.
inline constexpr char kTorchVariant[] = "torch";

/// A kernel's variants for one run-time layout, and how to make each.
struct VariantSpace {
  std::string kind;         // "row", "column" or "elementwise"
  std::string kernel_name;  // for records and progress
  std::string spec_hash;    // SHA-256 of the kernel spec without outer extents
  std::string bucket;       // the shape bucket
  /// What a rebuild needs (SpecText); made only when a record is written.
  std::function<std::string()> spec;
  std::vector<std::string> candidates;  // candidates[0]: the heuristic's
  /// The kernel and launch shape of a variant; an error for one that cannot run here.
  std::function<absl::StatusOr<autotune::LaunchCandidate>(const std::string&)> make;
};

/// Where the choice is made.
struct ChoiceContext {
  const cache::DiskCache* disk = nullptr;
  autotune::TuneConfig tune;
  std::string gpu;  // device name; "" without a GPU
  int arch = 0;
  int driver = 0;
  std::string gpu_bus;  // the GPU's PCI bus id, for the lock that serializes timing on it
  bool forced = false;  // the user fixed the variant: no record, no tuning
};

/// A chosen variant and its kernel.
struct Choice {
  std::string variant;
  autotune::LaunchCandidate launch;
  std::string how;     // "forced", "recorded", "tuned", "heuristic" or "lazy" (the group's
                       // torch ops until the heuristic's kernel compiles: TuneConfig::lazy)
  std::string trials;  // the tuning trials behind the choice, where there were any
  /// Tuning is deferred (TuneConfig::background): the caller makes a DeferredTuning.
  bool tune_later = false;
  /// With how "lazy": the heuristic's kernel (written, not compiled), which is to replace the
  /// torch ops once it has compiled.
  std::optional<autotune::LaunchCandidate> heuristic;
};

/// The variant to run. A recorded decision for (spec, bucket, GPU) wins when it was tuned or
/// tuning is off; else, given `setup` (a GPU and the call's buffers) and tuning on, the
/// candidates are tuned now and the winner recorded, or, with background tuning, the
/// heuristic's variant runs and the choice says `tune_later`; else the heuristic's is used and
/// recorded as such; with lazy tuning and the group's torch ops among the candidates, those
/// run (how "lazy") while the heuristic's kernel compiles, unless this process has it
/// compiled already. Fails only when the chosen variant's kernel cannot be written.
absl::StatusOr<Choice> ChooseVariant(const VariantSpace& space, const ChoiceContext& context,
                                     const autotune::BenchSetup* setup);

/// The kernel that ChooseVariant with a GPU and the call's buffers returns without tuning
/// first: the recorded variant where the record decides, else the heuristic's. Records and
/// tunes nothing (for compiling ahead of a call). `awaited` (may be null) says whether that
/// call waits for the kernel's compile: not where lazy tuning runs the group's torch ops
/// until it has compiled.
absl::StatusOr<autotune::LaunchCandidate> UntunedLaunch(const VariantSpace& space,
                                                        const ChoiceContext& context,
                                                        bool* awaited = nullptr);

class OtherTuning;

/// A tuning left for later: from construction the candidates compile on the background pool
/// (codegen::SubmitCompile); once they have, Finish times them on a call's buffers, records
/// the winner and returns it (the heuristic's variant where tuning fails).
class DeferredTuning {
 public:
  DeferredTuning(VariantSpace space, ChoiceContext context);
  ~DeferredTuning();
  DeferredTuning(const DeferredTuning&) = delete;
  DeferredTuning& operator=(const DeferredTuning&) = delete;

  /// Ready to finish: every candidate's compile has finished (well or not); or, while another
  /// process tunes this kernel, its record has appeared, its lock was released or the wait
  /// timed out (polled at most every 50 ms).
  bool Compiled() const;
  /// Call once, after Compiled(): times the candidates and records the winner, or takes the
  /// other process's record (else the heuristic's variant, recording nothing). `grid_for`,
  /// where given, sizes each candidate's grid from its variant for the call `setup` holds (a
  /// kernel of symbolic sizes whose candidates were made for another call's sizes).
  absl::StatusOr<Choice> Finish(
      const autotune::BenchSetup& setup,
      const std::function<absl::StatusOr<unsigned>(const std::string& variant)>& grid_for = {});

 private:
  VariantSpace space_;
  ChoiceContext context_;
  std::vector<autotune::LaunchCandidate> launches_;
  std::vector<std::string> names_;
  std::shared_ptr<std::atomic<int>> left_;  // compiles not finished; shared with the jobs
  std::unique_ptr<cache::FileLock> lock_;   // this process tunes the kernel (shared cache)
  std::unique_ptr<OtherTuning> other_;      // another process tunes it: wait for its record
  mutable bool other_over_ = false;
  mutable double last_poll_ms_ = 0;
};

/// DeferredTuning objects alive in this process: kernels whose tuning has not finished.
int64_t OutstandingTunings();

/// The spec of a kernel for rebuilding it without the model: its kind and name, each input's
/// dtype, sizes, strides and alignment, and the fusion group body.
std::string SpecText(const std::string& kind, const std::string& name,
                     const graph::Graph& body, const std::vector<codegen::TensorView>& inputs);

/// SpecText parsed back.
struct ParsedSpec {
  std::string kind;
  std::string name;
  std::vector<graph::TensorType> input_types;
  std::vector<codegen::TensorView> inputs;  // address: the alignment (address % 16)
  std::unique_ptr<graph::Graph> body;
};
absl::StatusOr<ParsedSpec> ParseSpecText(const std::string& text);

/// The inputs and outputs of a call as the benchmark sees them.
autotune::BenchSetup MakeBenchSetup(const std::vector<at::Tensor>& inputs,
                                    const std::vector<at::Tensor>& outputs,
                                    std::vector<uint8_t> params, int arch);

/// "<prefix><=2^k": `n` rounded up to a power of two.
std::string PowerOfTwoBucket(const std::string& prefix, int64_t n);

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_KERNEL_CHOICE_H_
