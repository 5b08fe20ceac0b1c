// A model ready to import and to run eagerly, whatever it came from: a TorchScript module, a
// torch.export archive or an FX graph from the Python package.
#ifndef TORCHFUSE_FRONTEND_TORCH_MODEL_SOURCE_H_
#define TORCHFUSE_FRONTEND_TORCH_MODEL_SOURCE_H_

#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torch::jit {
struct GraphFunction;
}

namespace torchfuse::frontend {

class ModelSource {
 public:
  /// Wraps a forward graph whose inputs are all tensors and whose parameters are constants.
  /// `origin` names where it came from ("TorchScript", "torch.export", "FX").
  static absl::StatusOr<ModelSource> FromGraph(std::shared_ptr<torch::jit::Graph> graph,
                                               std::string origin);
  /// A module's forward, frozen (a clone in eval mode; parameters folded in as constants).
  static absl::StatusOr<ModelSource> FromModule(const torch::jit::Module& module);
  /// Loads `path`: a torch.export archive (.pt2) or a TorchScript archive (.pt), told apart by
  /// content. Parameters are put on `device`. NotFound names a missing file; InvalidArgument a
  /// file that is neither.
  static absl::StatusOr<ModelSource> Load(const std::string& path,
                                          at::Device device = at::Device(at::kCPU));

  /// The forward graph: tensor inputs only, parameters as constants. Importers copy it.
  const std::shared_ptr<torch::jit::Graph>& graph() const { return graph_; }
  const std::string& origin() const { return origin_; }

  /// Runs the graph op by op through TorchScript's interpreter, with no graph optimization:
  /// the eager reference.
  c10::IValue RunEager(std::vector<c10::IValue> inputs) const;

  /// A copy whose constants (parameters) live on `device`.
  ModelSource To(at::Device device) const;
  /// A copy whose floating-point constants are f64 and whose casts to f32 cast to f64: with f64
  /// inputs, an exact reference (the graph's casts to f16 and bf16 still round).
  ModelSource InDouble() const;

 private:
  ModelSource(std::shared_ptr<torch::jit::Graph> graph, std::string origin,
              std::shared_ptr<torch::jit::CompilationUnit> unit = nullptr);
  std::shared_ptr<torch::jit::Graph> graph_;
  std::string origin_;
  std::shared_ptr<torch::jit::GraphFunction> function_;
  // The compilation unit of the module a graph was frozen from: the graph's inlined call
  // stacks point at its functions, and an op that throws in RunEager reads them for the
  // error's stack trace (with the unit freed, that was a use after free).
  std::shared_ptr<torch::jit::CompilationUnit> unit_;
};

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_MODEL_SOURCE_H_
