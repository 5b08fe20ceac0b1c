// torchfuse::Compile: a TorchScript module in, a module that runs fused kernels out.
#ifndef TORCHFUSE_RUNTIME_COMPILED_MODULE_H_
#define TORCHFUSE_RUNTIME_COMPILED_MODULE_H_

#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend_torch/model_source.h"
#include "graph/graph.h"
#include "runtime/explain.h"
#include "runtime/options.h"

namespace torchfuse {

/// Counters of what a CompiledModule did; for tests and reports.
struct RunStats {
  int64_t calls = 0;
  int64_t eager_calls = 0;         // whole calls run by the original module
  int64_t specializations = 0;     // input signatures compiled
  int64_t fused_launches = 0;      // fused kernels launched
  int64_t torch_ops = 0;           // nodes run through torch (matmul, opaque, unfused groups)
  int64_t unfused_groups = 0;      // groups that failed to compile and run through torch
  int64_t torch_groups = 0;        // group runs of their own torch ops, which the tuner
                                   // timed faster than the group's kernel
  int64_t lazy_groups = 0;         // group runs of their own torch ops while their kernels
                                   // compile (lazy tuning, the default)
  int64_t direct_views = 0;        // views built without torch (a layout seen before)
  int64_t gather_launches = 0;     // lookups (embedding, table[indices]) run by the gather kernel
  int64_t scatter_launches = 0;    // index_puts with accumulate (embedding backwards) run by
                                   // torchfuse's scatter-add kernel
  int64_t conv_launches = 0;       // depthwise convolutions run by torchfuse's kernel
  int64_t padded_copies = 0;       // operands copied with zero padding for a matrix product
                                   // (a weight's copy is made once, while it is unchanged)
};

/// A compiled module: call forward() like the original's. Copies share state.
class CompiledModule {
 public:
  /// Runs the module. CUDA inputs run the compiled plan for their signature (dtype, device,
  /// shape); CPU inputs, non-tensor inputs and signatures past Options::max_specializations
  /// run the original module.
  c10::IValue forward(std::vector<c10::IValue> inputs);

  /// Builds, ahead of its first call, the plan of the calls whose tensors have static `specs`
  /// on CUDA device `device`, and starts compiling the kernels that call will need on the
  /// background pool, so that it finds them compiled or in flight (a caller that has more
  /// work before that call, as torch.compile's does, overlaps their compiles with it).
  /// Returns the plan's fused graph explained. Prepares nothing (FailedPrecondition) where
  /// the first call would not build a plan for exactly these sizes: a plan exists, or sizes
  /// are declared dynamic. A plan that fails to build is left to the call, which reports it.
  absl::StatusOr<Explanation> Prepare(const std::vector<graph::TensorType>& specs, int device);

  /// Counters since compilation.
  RunStats stats() const;
  /// Counters of the last call only.
  RunStats last_call_stats() const;
  /// The fused graph of the most recently compiled specialization ("" before any).
  std::string last_graph() const;
  /// The names of the fused kernels the last call launched, in launch order.
  std::vector<std::string> last_kernels() const;
  /// The variants of those kernels ("block_t256", "b128_u2"), in launch order.
  std::vector<std::string> last_variants() const;
  /// The CUDA sources of those kernels, in launch order.
  std::vector<std::string> last_sources() const;

  struct Impl;

 private:
  friend absl::StatusOr<CompiledModule> CompileModule(const torch::jit::Module&, const Options&);
  friend absl::StatusOr<CompiledModule> CompileSource(const frontend::ModelSource&,
                                                      const Options&);
  explicit CompiledModule(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

/// Compiles `module` (see CompiledModule). Fails only if the module cannot be frozen.
absl::StatusOr<CompiledModule> CompileModule(const torch::jit::Module& module,
                                             const Options& options = {});

/// Compiles a model of any origin (torch.export archive, FX graph, TorchScript): calls with
/// unsupported inputs run `source.RunEager`.
absl::StatusOr<CompiledModule> CompileSource(const frontend::ModelSource& source,
                                             const Options& options = {});

/// As CompileModule, throwing a c10::Error on failure (the API edge for torch users).
CompiledModule Compile(const torch::jit::Module& module, const Options& options = {});

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_COMPILED_MODULE_H_
