// Embedding lookups (aten::embedding's forward) run as torchfuse's row-gather kernel
// (codegen::EmitGatherKernel): one launch, instead of torch's index_select and the views
// around it, whose host cost is several times a launch's.
#ifndef TORCHFUSE_RUNTIME_GATHER_RUNNER_H_
#define TORCHFUSE_RUNTIME_GATHER_RUNNER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/driver_api.h"
#include "runtime/group_runner.h"

namespace torchfuse::runtime {

class GatherRunner {
 public:
  explicit GatherRunner(RunnerEnv env) : env_(std::move(env)) {}

  /// Whether `n` is an embedding lookup this runner takes: aten::embedding of a table and
  /// indices (its other arguments only change the backward).
  static bool Takes(const graph::Node& n);

  /// table[indices] (sizes: indices' then the table's row): nullopt where the operands are not
  /// ones the kernel takes (a table not contiguous or not on the GPU, other index types, no
  /// elements), so that torch runs the op; an error where the kernel did not launch.
  absl::StatusOr<std::optional<at::Tensor>> Run(const at::Tensor& table,
                                                const at::Tensor& indices);

 private:
  RunnerEnv env_;
  // Loaded kernels by (ordinal, unit bytes, index bytes).
  std::map<std::tuple<int, int, int>, std::shared_ptr<const codegen::LoadedKernel>> kernels_;
};

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_GATHER_RUNNER_H_
