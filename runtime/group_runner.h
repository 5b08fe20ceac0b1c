// Runs one fusion group as a compiled kernel on CUDA tensors.
#ifndef TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
#define TORCHFUSE_RUNTIME_GROUP_RUNNER_H_

#include <ATen/ATen.h>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autotune/tuner.h"
#include "cache/disk_cache.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "codegen_nvrtc/row_kernel.h"
#include "graph/graph.h"
#include "runtime/kernel_choice.h"
#include "runtime/options.h"

namespace torchfuse::frontend {
class ReferenceExecutor;
}  // namespace torchfuse::frontend

namespace torchfuse::runtime {

/// What runners share: the disk cache and the tuning configuration.
struct RunnerEnv {
  std::shared_ptr<cache::DiskCache> disk;  // null: no disk cache
  autotune::TuneConfig tune;
  /// From `options` (cache_dir, tune_budget_ms) and the environment.
  static RunnerEnv From(const Options& options);
};

/// A fusion group's kernels: chosen (recorded, tuned or heuristic), compiled and loaded on
/// first use per run-time layout.
class GroupRunner {
 public:
  /// A runner for `group` (a fusion_group node that outlives the runner): a row-reduction
  /// kernel where the body reduces, else an elementwise one. Fails when the body is not one
  /// the emitters handle.
  static absl::StatusOr<std::unique_ptr<GroupRunner>> Create(const graph::Node& group,
                                                             const Options& options,
                                                             RunnerEnv env);
  virtual ~GroupRunner() = default;

  /// Allocates the outputs and launches the kernel on the current stream, or runs the
  /// group's own torch ops where the tuner found them faster (ran_torch()). `inputs` are on
  /// one CUDA device.
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);
  /// The last Run ran the group's torch ops, not a kernel.
  bool ran_torch() const { return ran_torch_; }
  /// ... and ran them because its kernels were still compiling (lazy tuning).
  bool ran_until_compiled() const { return ran_torch_ && lazy_slot_ != nullptr; }

  /// The group's own torch ops (its unfused form) on a call's inputs.
  using TorchOps =
      std::function<absl::StatusOr<std::vector<at::Tensor>>(const std::vector<at::Tensor>&)>;
  /// Given them, the tuner times them as one more candidate (kTorchVariant; see
  /// autotune::TuneConfig::torch_candidate), and a layout whose choice they are runs them.
  void set_torch_ops(TorchOps ops) { torch_ops_ = std::move(ops); }
  /// The sizes of the whole graph's call, for symbols of the body's outputs that its inputs
  /// do not give (a mask made from positions and expanded to the batch); null for none. Set
  /// before each Run of a graph with symbolic sizes.
  void set_call_binding(const graph::SymbolBinding* binding) { call_binding_ = binding; }

  /// A kernel ready to launch for a layout.
  struct Ready {
    std::shared_ptr<const codegen::LoadedKernel> kernel;  // null where `torch`
    bool torch = false;  // the group's torch ops run instead of a kernel
    std::string name;
    std::string variant;
    std::string source;  // CUDA C++ of the kernel
    unsigned grid = 1;
    unsigned block = 1;
  };

  /// The kernel that contiguous inputs of the body's types would run on a GPU of `arch`, and
  /// the spec hash its tuning records are filed under (for inspection; nothing is compiled).
  struct DefaultKernel {
    codegen::KernelSource source;
    std::string spec_hash;
  };
  absl::StatusOr<DefaultKernel> DefaultSource(int arch);

  /// Compiles, without running anything, the kernel that inputs laid out as `inputs` (empty:
  /// contiguous and aligned) run on `arch`, into the disk cache: `variant` where given, else
  /// the one recorded for `arch` without a GPU, else the heuristic's (recorded as such).
  /// Where that is kTorchVariant (the group's torch ops), nothing is compiled and the
  /// kernel is empty.
  struct Precompiled {
    codegen::KernelSource kernel;
    std::string variant;
  };
  absl::StatusOr<Precompiled> Precompile(const std::vector<codegen::TensorView>& inputs, int arch,
                                         const std::string& variant = "");

  /// Starts compiling on the background pool, ahead of the call that needs it, the kernel
  /// that contiguous inputs run first on CUDA `device` (their recorded variant, else the
  /// heuristic's), so that the call finds it compiled or in flight. Best effort: a failure
  /// leaves the compile to the call.
  void Warm(const at::Device& device);

  /// The name of the kernel the last Run launched ("" before any).
  const std::string& last_kernel() const;
  /// The variant of the kernel the last Run launched ("" before any).
  const std::string& last_variant() const;
  /// The CUDA source of the kernel the last Run launched ("" before any).
  const std::string& last_source() const;
  const std::string& name() const { return name_; }

 protected:
  GroupRunner(const graph::Node& group, RunnerEnv env);
  /// Run's kernel path: allocates the outputs and launches the layout's kernel (Launch),
  /// whose slot may say that the torch ops run instead.
  virtual absl::StatusOr<std::vector<at::Tensor>> RunKernel(
      const std::vector<at::Tensor>& inputs) = 0;
  /// `space` with the torch candidate added where it is one: tuning may include it, the
  /// variant is not fixed by options, and torch ops are given or the kernel is only compiled
  /// `ahead` (where a recorded torch choice compiles nothing).
  void AddTorchCandidate(bool forced, VariantSpace* space, bool ahead = false) const;
  /// What runs the torch ops on the call's `inputs` (the tensors the benchmark reads), for
  /// BenchSetup::run_torch; empty without torch ops, or where what they may hold at once
  /// would take more than a quarter of the device memory left.
  std::function<absl::Status()> TorchOnCall(const std::vector<at::Tensor>& inputs) const;
  /// Uninitialized outputs of the body's types on `device`, dense in `order`
  /// (codegen::DomainOrder; null: contiguous), their symbols bound by `binding`.
  std::vector<at::Tensor> AllocateOutputs(const at::Device& device,
                                          const std::vector<int>* order = nullptr,
                                          const graph::SymbolBinding& binding = {}) const;
  /// Views of contiguous tensors of the body's input types at address 0 (a symbol's size is
  /// kSymbolHint).
  std::vector<codegen::TensorView> DefaultInputViews() const;
  /// The size DefaultInputViews gives a symbol.
  static constexpr int64_t kSymbolHint = 64;

  /// The body has symbolic sizes: each call binds them from its inputs.
  bool symbolic() const { return symbolic_; }
  /// Binds the body's symbols to the sizes of `inputs`; fails when a size differs from the
  /// body's or an output's size is not fixed by the inputs.
  absl::StatusOr<graph::SymbolBinding> Bind(const std::vector<codegen::TensorView>& inputs) const;
  /// The indexing of a call: `indexing` (the body's), or for symbolic sizes its copy in
  /// `bound` with the values `binding` takes from `inputs`. Kernels are written from the
  /// body's, sizes and launches computed from the call's.
  template <typename Indexing>
  absl::StatusOr<const Indexing*> IndexingFor(const Indexing& indexing,
                                              const std::vector<codegen::TensorView>& inputs,
                                              graph::SymbolBinding* binding,
                                              Indexing* bound) const {
    if (!symbolic_) return &indexing;
    absl::StatusOr<graph::SymbolBinding> b = Bind(inputs);
    if (!b.ok()) return b.status();
    *binding = std::move(*b);
    *bound = indexing.Bound(*binding);
    return bound;
  }
  /// True while SpaceFor serves no call but the default kernel (inspection, ahead-of-time
  /// compiles without sizes): a symbolic row length then takes the kernel for any length.
  bool for_any_size_ = false;
  const graph::SymbolBinding* call_binding_ = nullptr;
  class AnySize;

  /// The variants for inputs `inputs` and outputs at `output_addresses` on `device`; `forced`
  /// when options fix the variant.
  virtual absl::StatusOr<VariantSpace> SpaceFor(const std::vector<codegen::TensorView>& inputs,
                                                const std::vector<uintptr_t>& output_addresses,
                                                const codegen::RowDevice& device,
                                                bool* forced) = 0;

  /// A call's tensors as the layout computations see them.
  struct CallViews {
    explicit CallViews(const std::vector<at::Tensor>& inputs);
    CallViews(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);
    /// Records the outputs' addresses (replacing any recorded before).
    void SetOutputs(const std::vector<at::Tensor>& outputs);
    std::vector<codegen::TensorView> inputs;
    std::vector<uintptr_t> output_addresses;
  };

  /// The kernel of a layout, and its tuning where that was deferred.
  struct Slot {
    Ready ready;
    std::unique_ptr<DeferredTuning> deferred;  // null once tuned (or when never tuned)
    std::vector<autotune::ScratchBuffer> scratch;  // what the variants need besides outputs
    // The parameter block of the call the candidates were made for: their grids fit that
    // shape, so a deferred tuning finishes only in a call of the same shape.
    std::vector<uint8_t> made_for;
    // Lazy tuning: the heuristic's kernel, which replaces the group's torch ops once it has
    // compiled (Launch), or at once where those fail, or where the tuning fails before it
    // has compiled. Set while the slot runs torch ops only until that kernel compiles (not
    // because the tuner chose them).
    std::optional<Choice> fallback;
    int fallback_arch = 0;  // the arch it compiles for
  };

  /// Replaces a lazy slot's torch ops by its heuristic's kernel (compiled now if it has not
  /// been), saying once why.
  absl::Status RunFallback(Slot* slot, const at::Device& device, const std::string& why);
  /// Loads a lazy slot's heuristic's kernel in place of its torch ops; the fallback is spent
  /// either way (where the load fails, the torch ops stay). The load's status.
  absl::Status UseFallback(Slot* slot, const at::Device& device) const;

  /// Chooses the variant for a call's first meeting of a layout (tuning on the call's own
  /// buffers where it tunes now, deferring it where it tunes in the background), then
  /// compiles and loads it. `scratch`: the buffers every variant takes after the outputs.
  absl::StatusOr<Slot> Prepare(const std::vector<at::Tensor>& inputs,
                               const std::vector<at::Tensor>& outputs, const CallViews& call,
                               std::vector<uint8_t> params,
                               std::vector<autotune::ScratchBuffer> scratch = {});

  /// The context of a variant choice on the GPU `info` describes (`forced` left to SpaceFor).
  ChoiceContext ContextOn(const codegen::DeviceInfo& info) const;
  /// Loads `choice`'s kernel on device `ordinal` into `ready`.
  absl::Status Load(Choice choice, int ordinal, Ready* ready) const;
  /// Times the deferred candidates of `slot` on the call's buffers and switches to the winner.
  /// `grid_for` (a symbolic runner's) sizes the candidates' grids for this call.
  void FinishTuning(Slot* slot, const std::vector<at::Tensor>& inputs,
                    const std::vector<at::Tensor>& outputs, const std::vector<uint8_t>& params,
                    const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for);

  /// Launches `slot`'s kernel on the call's tensors with parameter block `params` on the
  /// current stream, and remembers it as the last kernel. A deferred tuning whose candidates
  /// have compiled is finished first, on the call's buffers (not while the stream captures a
  /// CUDA graph), and the winner replaces the kernel: in a call of the sizes the candidates
  /// were made for, or in any call where `grid_for` sizes their grids. `scratch`: the
  /// addresses of the slot's scratch buffers, passed after the outputs.
  /// `grid_for`, where given, sizes the grid for this call from the kernel's variant (a
  /// symbolic runner's slot serves calls of different sizes); else the slot's grid.
  absl::Status Launch(Slot* slot, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs, std::vector<uint8_t>* params,
                      const std::vector<void*>& scratch = {},
                      const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for = {});

  /// A call's layout as a memo key: per input its rank, sizes, strides and address modulo
  /// 16 (what vector widths depend on), and the device.
  std::vector<int64_t> MemoKey(const std::vector<at::Tensor>& inputs, int ordinal) const;
  /// The outputs of a call whose key (MemoKey) matches an earlier call's, with that call's
  /// kernel launched on them again without recomputing its layout; nullopt where none
  /// matches (the call then takes the full path and ends in LaunchAndRemember).
  std::optional<absl::StatusOr<std::vector<at::Tensor>>> Replay(
      const std::vector<at::Tensor>& inputs, const std::vector<int64_t>& key);
  /// Launches `slot`'s kernel (Launch; `grid_for` sizes a symbolic runner's grid) and
  /// remembers for Replay what the call of `key` launched: its outputs' layouts, parameter
  /// block, slot and grid. Nothing is remembered while the slot's tuning is deferred (its
  /// kernel and grid may still change) or where the outputs' sizes came from the whole call's
  /// binding.
  absl::Status LaunchAndRemember(
      Slot* slot, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
      std::vector<uint8_t> params, std::vector<int64_t> key,
      const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for);

  /// The kernels a runner has met, per run-time layout and device. Entries do not move (a
  /// deque), so last_ may point into them.
  template <typename Layout>
  class KernelTable {
   public:
    /// The kernel of (`layout`, `ordinal`), made by `prepare` the first time.
    template <typename PrepareFn>
    absl::StatusOr<Slot*> Get(const Layout& layout, int ordinal, PrepareFn&& prepare) {
      for (Entry& e : entries_) {
        if (e.ordinal == ordinal && e.layout == layout) return &e.slot;
      }
      absl::StatusOr<Slot> slot = prepare();
      if (!slot.ok()) return slot.status();
      entries_.push_back({layout, ordinal, std::move(*slot)});
      return &entries_.back().slot;
    }

   private:
    struct Entry {
      Layout layout;
      int ordinal;
      Slot slot;
    };
    std::deque<Entry> entries_;
  };

  // What a call launched, for calls of the same layout (Replay).
  struct Memo {
    std::vector<int64_t> key;
    std::vector<std::vector<int64_t>> out_sizes, out_strides;
    std::vector<at::TensorOptions> out_options;
    std::vector<uintptr_t> out_alignment;  // address modulo 16
    std::vector<uint8_t> params;
    Slot* slot = nullptr;
    unsigned grid = 0;
  };
  static constexpr size_t kMemos = 8;
  std::deque<Memo> memos_;  // the most recently used first
  // Bind took a size from the whole call's binding: the inputs alone do not key a call.
  mutable bool uses_call_binding_ = false;

  const graph::Node& group_;
  const std::string name_;
  const RunnerEnv env_;
  TorchOps torch_ops_;
  bool ran_torch_ = false;  // Launch met a torch slot in this Run
  Slot* lazy_slot_ = nullptr;  // ... a slot that runs torch ops until its kernel compiles
  // The last kernel launched, owned by the subclass's kernel table (whose entries do not move).
  const Ready* last_ = nullptr;
  bool symbolic_ = false;
};

/// The view of a tensor that layout computations take.
codegen::TensorView ViewOf(const at::Tensor& t);

/// The torch ops of fusion group `group`, run by `executor` on their operands' device (for
/// GroupRunner::set_torch_ops); both must outlive the function.
GroupRunner::TorchOps TorchOpsOf(frontend::ReferenceExecutor* executor, const graph::Node* group);

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
