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

  /// Ends a run of a graph's nodes: forgets the padded copies made for its matrix products
  /// (a copy serves every product of one run that pads the same tensor the same way).
  void EndRun() { padded_.clear(); }

  /// The sizes of the symbols of a graph with symbolic sizes, for the nodes that take a size
  /// from their types (reshape, squeeze, expand); null for static graphs. Must outlive the
  /// runs it serves.
  void set_binding(const graph::SymbolBinding* binding) { binding_ = binding; }

  /// A zero-padded copy of a matrix for the products of one run.
  struct PaddedCopy {
    // The tensor copied, kept alive so that its memory is not reused within the run by a
    // tensor that would then match its address.
    at::Tensor source;
    const void* data = nullptr;
    std::vector<int64_t> sizes, strides;
    int64_t version = 0;
    int64_t rows = 0, cols = 0;
    at::Tensor padded;
  };

 private:
  // The sizes of `v` in this run.
  std::vector<int64_t> SizesOf(const graph::Value* v) const {
    return binding_ == nullptr ? v->type().sizes : binding_->Apply(v->type().sizes);
  }

  const OpaqueTable* opaque_;
  const graph::SymbolBinding* binding_ = nullptr;
  std::vector<PaddedCopy> padded_;
  int depth_ = 0;  // > 0 while running a fusion group's body
  std::map<std::pair<const graph::Node*, std::string>, at::Tensor> params_;
};

/// Convenience: imports nothing, just runs `model.graph` with its opaque table.
absl::StatusOr<std::vector<at::Tensor>> RunReference(const ImportedModel& model,
                                                     const std::vector<at::Tensor>& inputs);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_
