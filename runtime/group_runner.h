// Runs one fusion group as a compiled kernel on CUDA tensors.
#ifndef TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
#define TORCHFUSE_RUNTIME_GROUP_RUNNER_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "graph/graph.h"
#include "runtime/options.h"

namespace torchfuse::runtime {

/// A fusion group's kernels: emitted, compiled and loaded on first use per run-time layout
/// (and, for row groups, variant).
class GroupRunner {
 public:
  /// A runner for `group` (a fusion_group node that outlives the runner): a row-reduction
  /// kernel where the body reduces, else an elementwise one. Fails when the body is not one
  /// the emitters handle.
  static absl::StatusOr<std::unique_ptr<GroupRunner>> Create(const graph::Node& group,
                                                             const Options& options);
  virtual ~GroupRunner() = default;

  /// Allocates the outputs and launches the kernel on the current stream. `inputs` are on one
  /// CUDA device.
  virtual absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) = 0;

  /// The kernel that contiguous inputs of the body's types would run on a GPU of `arch`
  /// (for inspection; nothing is compiled).
  virtual absl::StatusOr<codegen::KernelSource> DefaultSource(int arch) = 0;

  /// The name of the kernel the last Run launched ("" before any).
  const std::string& last_kernel() const;
  const std::string& name() const { return name_; }

 protected:
  explicit GroupRunner(const graph::Node& group);
  /// Uninitialized outputs of the body's types on `device`.
  std::vector<at::Tensor> AllocateOutputs(const at::Device& device) const;
  /// Views of contiguous tensors of the body's input types at address 0.
  std::vector<codegen::TensorView> DefaultInputViews() const;

  const graph::Node& group_;
  const std::string name_;
  // The name of the last kernel launched, owned by the subclass's kernel table (whose entries
  // do not move).
  const std::string* last_kernel_ = nullptr;
};

/// The view of a tensor that layout computations take.
codegen::TensorView ViewOf(const at::Tensor& t);

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
