// TorchScript → torchfuse IR.
#ifndef TORCHFUSE_FRONTEND_TORCH_TORCHSCRIPT_IMPORTER_H_
#define TORCHFUSE_FRONTEND_TORCH_TORCHSCRIPT_IMPORTER_H_

#include <torch/script.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend_torch/imported_model.h"
#include "graph/graph.h"

namespace torchfuse::frontend {

/// Called after an op that torch runs at import or in an opaque node threw and the exception was
/// handled (a fallback took over). A host that embeds an interpreter (the Python extension)
/// installs one that clears the error state the interpreter may keep for that exception and
/// returns its text ("" where there is none): the C++ exception of a Python error has none.
void SetOpFailureHook(std::function<std::string()> hook);
/// Runs the hook, if any: call it where such an exception is caught and not rethrown. Returns
/// the interpreter's error text, or "".
std::string OpFailed();

/// What an op's exception `e` says, for messages: its what(), else the interpreter's error
/// (`interpreter`, from OpFailed), else its type; at most `limit` characters.
std::string ExceptionText(const std::exception& e, const std::string& interpreter,
                          size_t limit = 300);

/// Imports `module.forward` for inputs of the given types. The module is cloned, put in eval
/// mode and frozen (parameters and buffers become captured constants); calls are inlined and
/// non-tensor computations (sizes, lists, static branches) are evaluated at import. aten ops
/// without an IR equivalent become `opaque` nodes that torch runs. Errors: Unimplemented for an
/// unsupported dtype (naming op and dtype) or tensor-dependent control flow (naming the node).
absl::StatusOr<ImportedModel> ImportModule(const torch::jit::Module& module,
                                           const std::vector<graph::TensorType>& inputs);

/// The module's forward graph, frozen: a clone in eval mode with parameters and buffers folded
/// in as constants. ImportTorchScriptGraph takes it from there.
absl::StatusOr<std::shared_ptr<torch::jit::Graph>> FreezeModule(const torch::jit::Module& module);

/// Loads a TorchScript archive and imports it. NotFound names a missing path;
/// InvalidArgument names a file that is not a TorchScript archive.
absl::StatusOr<ImportedModel> ImportModuleFile(const std::string& path,
                                               const std::vector<graph::TensorType>& inputs);

/// Loads a TorchScript archive (same errors as ImportModuleFile).
absl::StatusOr<torch::jit::Module> LoadModule(const std::string& path);

/// Imports a TorchScript graph (e.g. from torch::jit::parseIR). Inputs of class type (`self`)
/// are skipped; the others take `inputs` in order. The graph is copied, not changed.
absl::StatusOr<ImportedModel> ImportTorchScriptGraph(const torch::jit::Graph& graph,
                                                     const std::vector<graph::TensorType>& inputs);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_TORCHSCRIPT_IMPORTER_H_
