// Runs one fusion group: as a compiled kernel on CUDA tensors, or through torch.
#ifndef TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
#define TORCHFUSE_RUNTIME_GROUP_RUNNER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "graph/graph.h"

namespace torchfuse::runtime {

/// A fusion group's kernels, one per run-time layout met so far.
class GroupRunner {
 public:
  /// `group` is a fusion_group node; it must outlive the runner.
  static absl::StatusOr<std::unique_ptr<GroupRunner>> Create(const graph::Node& group,
                                                             int block_size, int unroll = 0);

  /// The kernel source for `layout` (emitted once per layout).
  absl::StatusOr<codegen::KernelSource> Source(const codegen::KernelLayout& layout);

  /// The layout of a call with these inputs (all on one CUDA device) and outputs.
  codegen::LaunchLayout Layout(const std::vector<at::Tensor>& inputs,
                               const std::vector<at::Tensor>& outputs) const;

  /// Allocates the outputs and launches the kernel on the current stream.
  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs);

  /// The layout of contiguous, aligned inputs of the body's types (for inspection).
  codegen::LaunchLayout DefaultLayout() const;

  const codegen::GroupIndexing& indexing() const { return indexing_; }
  const std::string& name() const { return name_; }

 private:
  GroupRunner(const graph::Node& group, codegen::GroupIndexing indexing, int block_size,
              int unroll);
  const graph::Node& group_;
  const codegen::GroupIndexing indexing_;
  const std::string name_;
  const int block_size_;
  const int unroll_;  // 0: as ComputeLayout chose
  std::map<std::string, codegen::KernelSource> sources_;  // by layout signature
  // The kernels met so far, looked up without building any string.
  struct Ready {
    codegen::KernelLayout layout;
    int ordinal;
    std::shared_ptr<const codegen::LoadedKernel> kernel;
  };
  std::vector<Ready> ready_;
};

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_GROUP_RUNNER_H_
