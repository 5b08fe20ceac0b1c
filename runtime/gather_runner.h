// Embedding lookups (aten::embedding's forward) and tensors indexed by one index tensor over
// their first dim (aten::index: a window's relative position bias from its table) run as
// torchfuse's row-gather kernel (codegen::EmitGatherKernel): one launch, instead of torch's
// index_select or index kernel and the views around it, whose host cost is several times a
// launch's. Their backward, index_put with
// accumulate over the rows of a table (embedding_dense_backward's decomposition), runs as a
// copy and the row scatter-add kernel (codegen::EmitScatterAddKernel): two launches, where
// torch's sorts the indices first (about ten launches).
#ifndef TORCHFUSE_RUNTIME_GATHER_RUNNER_H_
#define TORCHFUSE_RUNTIME_GATHER_RUNNER_H_

#include <ATen/ATen.h>

#include <functional>
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

  /// Whether `n` is a lookup this runner takes: aten::embedding of a table and indices (its
  /// other arguments only change the backward), or one that IndexesRows.
  static bool Takes(const graph::Node& n);

  /// Whether `n` is `table[indices]` by one index tensor (aten::index over the first dim), the
  /// import marking it so (attribute "index_rows"): operands table and indices. Its negative
  /// indices count from the end, where an embedding's are out of range.
  static bool IndexesRows(const graph::Node& n);

  /// table[indices] (sizes: indices', then the table's after the first), negative indices
  /// counting from the end where `negative_from_end` (IndexesRows): nullopt where the operands
  /// are not ones the kernel takes (a table not contiguous or not on the GPU, an embedding's
  /// table not of two dims, other index types, no elements), so that torch runs the op; an
  /// error where the kernel did not launch.
  absl::StatusOr<std::optional<at::Tensor>> Run(const at::Tensor& table,
                                                const at::Tensor& indices,
                                                bool negative_from_end = false);

  /// Starts compiling on the background pool, ahead of the call that needs it, the kernel
  /// that node `n` (one that Takes or TakesScatterAdd) runs on CUDA `device` with operands of
  /// its types, the table's address assumed aligned as torch allocates; so that the call finds
  /// it compiled or in flight. Best effort: anything else leaves the compile to the call.
  void Warm(const graph::Node& n, const at::Device& device) const;

  /// Whether `n` is an index_put with accumulate over the first dim by one index tensor, the
  /// import marking it so (attribute "scatter_add"): operands self, indices, values; self f32
  /// or f64 and values of the same dtype (the kernel's atomic adds). Explain and the plan both
  /// ask this, so a node it refuses runs in torch and is reported as torch's.
  static bool TakesScatterAdd(const graph::Node& n);

  /// index_put(self, [indices], values, accumulate=True): a copy of `self` with each
  /// values[i, ...] added to its row indices[i]. nullopt where the operands are not ones the
  /// kernel takes (other dtypes than f32/f64, values not contiguous or that broadcast,
  /// no elements, or torch's deterministic algorithms on, which the atomic adds are not), so
  /// that torch runs the op; an error where the kernel did not launch.
  /// Where `fill` is given, self holds that one value everywhere (zeros_like's constant, as
  /// embedding_dense_backward starts from): the copy is a fill, which writes the table
  /// without reading self (on an H200, a [32000, 2048] f32 copy of a materialized self took
  /// 125 us).
  absl::StatusOr<std::optional<at::Tensor>> ScatterAdd(const at::Tensor& self,
                                                       const at::Tensor& indices,
                                                       const at::Tensor& values,
                                                       std::optional<double> fill = {});

  /// The one value every element of `v` holds where the graph makes it so (a scalar constant
  /// expanded, through views), else nullopt.
  static std::optional<double> UniformValue(const graph::Value* v);

 private:
  enum Kind { kGather, kIndexRows, kScatterAdd };
  // Launches the grid-stride kernel that `emit` writes over `total` elements, 256 threads a
  // block, on `device`'s current stream; the kernel is loaded once per (kind, device, `a`,
  // `b`), the two sizes it is emitted for.
  absl::Status Launch(Kind kind, int a, int b, const at::Device& device,
                      const std::function<absl::StatusOr<codegen::KernelSource>()>& emit,
                      int64_t total, void** args);

  RunnerEnv env_;
  // Loaded kernels by (kind, ordinal, unit or element bytes, index bytes).
  std::map<std::tuple<int, int, int, int>, std::shared_ptr<const codegen::LoadedKernel>> kernels_;
};

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_GATHER_RUNNER_H_
