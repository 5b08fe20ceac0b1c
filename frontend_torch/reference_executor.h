// Runs an IR graph with ATen ops, one op at a time: the reference that compiled kernels are
// tested against, and the path for nodes that run unfused.
#ifndef TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_
#define TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_

#include <ATen/ATen.h>

#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend_torch/imported_model.h"
#include "graph/graph.h"

namespace torchfuse::frontend {

/// Evaluates graphs with ATen on whatever device the inputs are on. Captured params are
/// copied to that device once and kept.
class ReferenceExecutor {
 public:
  /// `opaque` runs the graph's opaque nodes; it must outlive the executor.
  explicit ReferenceExecutor(const OpaqueTable* opaque) : opaque_(opaque) {}

  /// Runs `graph` on `inputs` (one per graph input); returns one tensor per graph output.
  absl::StatusOr<std::vector<at::Tensor>> Run(const graph::Graph& graph,
                                              const std::vector<at::Tensor>& inputs);

  /// Runs one node on its operand tensors; returns its outputs.
  absl::StatusOr<std::vector<at::Tensor>> RunNode(const graph::Node& node,
                                                  const std::vector<at::Tensor>& operands,
                                                  at::Device device);

  /// The tensor of a param node on `device` (cached).
  absl::StatusOr<at::Tensor> Param(const graph::Node& node, at::Device device);

 private:
  const OpaqueTable* opaque_;
  std::map<std::pair<const graph::Node*, std::string>, at::Tensor> params_;
};

/// Convenience: imports nothing, just runs `model.graph` with its opaque table.
absl::StatusOr<std::vector<at::Tensor>> RunReference(const ImportedModel& model,
                                                     const std::vector<at::Tensor>& inputs);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_
