// Runs an IR graph with ATen ops, one op at a time: the reference that compiled kernels are
// tested against, and the path for nodes that run unfused.
#ifndef TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_
#define TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_

#include <ATen/ATen.h>

#include <map>
#include <unordered_map>
#include <unordered_set>
#include <string>
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

  /// The tensor of a scalar constant node on `device` (a wrapped number on the CPU), made once:
  /// a constant uploaded on every call is a host-to-device copy that waits for the GPU. The
  /// ops that read it make new tensors; a caller that hands out a graph output clones it where
  /// SharesConstant says so.
  at::Tensor Constant(const graph::Node& node, at::Device device);

  /// Whether `t` is a cached constant or a view of one (its storage is one's).
  bool SharesConstant(const at::Tensor& t) const {
    return t.defined() && t.has_storage() &&
           constant_data_.count(t.storage().data()) > 0;
  }

  /// Ends a run of a graph's nodes. A padded copy made for its matrix products serves every
  /// product that pads the same tensor the same way, in this run and in later ones while the
  /// tensor's memory and version stay the same (a weight: GPT-2's LM head pads its 50257-row
  /// embedding matrix once, not on every call). A copy that a run did not use is dropped at
  /// that run's end, so copies of activations live one run. No-op where nothing was padded
  /// since the last end.
  void EndRun();
  /// Padded copies made so far (reused ones not counted).
  int64_t padded_copies_made() const { return padded_made_; }

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
    bool used = true;  // in the current run
  };

 private:
  // The product a @ b (+ bias) on padded copies (PaddedProduct, over padded_), or nullopt.
  c10::optional<at::Tensor> Padded(const at::Tensor& a, const at::Tensor& b,
                                   const c10::optional<at::Tensor>& bias, double beta,
                                   double alpha);

  // The sizes of `v` in this run.
  std::vector<int64_t> SizesOf(const graph::Value* v) const {
    return binding_ == nullptr ? v->type().sizes : binding_->Apply(v->type().sizes);
  }

  const OpaqueTable* opaque_;
  const graph::SymbolBinding* binding_ = nullptr;
  std::vector<PaddedCopy> padded_;
  bool padded_touched_ = false;  // a copy was made or reused since the last EndRun
  int64_t padded_made_ = 0;
  int depth_ = 0;  // > 0 while running a fusion group's body
  // By node and device (DeviceKey).
  std::map<std::pair<const graph::Node*, int64_t>, at::Tensor> params_, constants_;
  std::unordered_set<const void*> constant_data_;  // the constants' storages
  // graph::DeadAfter of each graph run (a fusion group's body runs on every call that leaves
  // the group to torch).
  std::unordered_map<const graph::Graph*, std::vector<std::vector<const graph::Value*>>>
      dead_after_;
};

/// The operands `in` of ATen's attention op `target` ("aten::...") as its kernels take them:
/// each tensor whose last dim is not of stride 1 made contiguous (the fused kernels take no
/// other rows), and query, key or value too where its rows do not start at 16-byte
/// addresses; the memory-efficient kernel's mask (its fourth tensor) with every stride a
/// multiple of 8 elements, padded as ATen's SDPA pads it before calling that kernel, the dims
/// it is broadcast along staying broadcast. The attention rewrite writes that mask padded; this
/// covers a mask that reaches the op in a layout the trace did not have.
std::vector<at::Tensor> AttentionOperands(const std::string& target,
                                          const std::vector<at::Tensor>& in);

/// Convenience: imports nothing, just runs `model.graph` with its opaque table.
absl::StatusOr<std::vector<at::Tensor>> RunReference(const ImportedModel& model,
                                                     const std::vector<at::Tensor>& inputs);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_REFERENCE_EXECUTOR_H_
