// FX graphs → TorchScript graphs, which the TorchScript importer takes to the IR.
//
// Two sources:
//  - the JSON that the Python package writes for an FX GraphModule (torchfuse.compile,
//    torch.compile(backend="torchfuse")), with the module's parameters handed over as tensors;
//  - torch.export archives (.pt2): the ATen-level graph in models/model.json, the weights in
//    data/weights.
// Every call_function names an aten op ("aten::gelu"); the graph is built by TorchScript's own
// schema matching, so overloads, defaults and implicit scalars resolve as in TorchScript, and
// ops without an IR equivalent become opaque nodes that torch runs, as for TorchScript import.
#ifndef TORCHFUSE_FRONTEND_TORCH_FX_IMPORTER_H_
#define TORCHFUSE_FRONTEND_TORCH_FX_IMPORTER_H_

#include <torch/script.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace torchfuse::frontend {

/// The JSON format version the Python package writes (`"version"` of the document).
inline constexpr int kFxJsonVersion = 1;

/// Builds the forward graph of an FX graph serialized as JSON:
/// `{"format": "torchfuse-fx", "version": 1, "nodes": [...]}` with nodes in FX order, each
/// `{"name", "op", "target", "args", "kwargs"}`; op is placeholder, get_attr, call_function or
/// output. Arguments are JSON scalars, lists, null, `{"node": NAME}`, `{"dtype": "float32"}`
/// or `{"device": "cuda:0"}`. A get_attr's target names a tensor of `attrs`; it becomes a
/// constant. Errors name the node.
absl::StatusOr<std::shared_ptr<torch::jit::Graph>> GraphFromFxJson(
    const std::string& json, const std::map<std::string, at::Tensor>& attrs);

/// Builds the forward graph of a torch.export archive: parameters, buffers and tensor constants
/// become constants (on `device`), user inputs become graph inputs. NotFound names a missing
/// file; InvalidArgument one that is not a torch.export archive; Unimplemented what this
/// importer does not take (symbolic shapes, pickled weights, non-tensor inputs).
absl::StatusOr<std::shared_ptr<torch::jit::Graph>> GraphFromExportedProgram(
    const std::string& path, at::Device device = at::Device(at::kCPU));

/// True when `path` is a zip archive holding a torch.export program (models/model.json).
bool IsExportedProgram(const std::string& path);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_FX_IMPORTER_H_
