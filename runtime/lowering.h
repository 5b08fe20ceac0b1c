// The front half of every compile: import for an input signature, then fuse.
#ifndef TORCHFUSE_RUNTIME_LOWERING_H_
#define TORCHFUSE_RUNTIME_LOWERING_H_

#include <torch/script.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend_torch/imported_model.h"
#include "graph/graph.h"
#include "runtime/options.h"

namespace torchfuse {

/// Imports `graph` for `inputs` and runs the fusion pipeline (when Options::fuse), dumping the
/// imported and the fused graph where TORCHFUSE_DUMP asks for them. `imported_text`, when
/// given, receives the imported graph as text.
absl::StatusOr<frontend::ImportedModel> ImportAndFuse(const torch::jit::Graph& graph,
                                                      const std::vector<graph::TensorType>& inputs,
                                                      const Options& options,
                                                      std::string* imported_text = nullptr);

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_LOWERING_H_
