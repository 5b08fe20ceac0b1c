// What torchfuse makes of a model: graphs, fusion groups, kernel sources and binaries.
#ifndef TORCHFUSE_RUNTIME_INSPECT_H_
#define TORCHFUSE_RUNTIME_INSPECT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/tuning_record.h"
#include "frontend_torch/model_source.h"
#include "graph/graph.h"
#include "runtime/explain.h"
#include "runtime/options.h"

namespace torchfuse {

/// One fused kernel of a model.
struct KernelReport {
  std::string group;                     // fusion group name ("gelu")
  std::vector<std::string> source_ops;   // the model's ops it took, in order
  std::string kernel_name;
  std::string source;                    // CUDA C++, for contiguous aligned inputs
  std::string ptx;                       // when asked for
  int arch = 0;
  bool is_ptx = false;                   // NVRTC could only make PTX for this arch
  int64_t binary_size = 0;
  double compile_ms = -1;                // its NVRTC compile's wall time; -1: read from a cache
  int dynamic_smem = 0;                  // bytes of dynamic shared memory a block takes
  std::string error;                     // compile error, if any
  std::string spec_hash;                 // what its tuning records are filed under
  std::vector<cache::TuningRecord> tuning;  // the cache's records of this kernel (any shape, GPU)
};

/// The whole report.
struct InspectReport {
  std::string imported_graph;
  std::string fused_graph;
  std::vector<KernelReport> kernels;
  int opaque_nodes = 0;  // nodes left to torch (matmul, unsupported ops)
  Explanation explanation;  // what fused and what torch runs, and why
};

/// Imports the model at `path` for `inputs`, fuses it, writes each kernel and compiles it with
/// NVRTC for `arch` (default: the arch of GPU 0; an error if there is none). NVRTC failures are
/// reported per kernel, not as an error.
absl::StatusOr<InspectReport> InspectModel(const std::string& path,
                                           const std::vector<graph::TensorType>& inputs,
                                           std::optional<int> arch, bool want_ptx = false,
                                           const Options& options = {});

/// As InspectModel, for a model already loaded.
absl::StatusOr<InspectReport> InspectSource(const frontend::ModelSource& source,
                                            const std::vector<graph::TensorType>& inputs,
                                            std::optional<int> arch, bool want_ptx = false,
                                            const Options& options = {});

/// The report as text: graph, groups with their source ops, each kernel's source and size.
std::string FormatReport(const InspectReport& report);
/// The report as a JSON document, for tools: {"format": "torchfuse-inspect", "version",
/// "imported_graph", "fused_graph", "explain": {"nodes", "fused_nodes", "kernels", "views",
/// "left_to_torch": [{"op", "types", "why", "expected"}]}, "kernels": [{"group", "ops", "name",
/// "source", "arch", "format", "binary_bytes", "error"?, "ptx"?, "spec_hash", "tuning": [the
/// cache's records]}]}.
std::string ReportJson(const InspectReport& report);

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_INSPECT_H_
