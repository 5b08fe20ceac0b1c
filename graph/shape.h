// Static shape and dtype rules of the IR's ops (PyTorch semantics).
#ifndef TORCHFUSE_GRAPH_SHAPE_H_
#define TORCHFUSE_GRAPH_SHAPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::graph {

/// Broadcasts two size lists by PyTorch's rules; InvalidArgument if they are incompatible.
absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b);

/// Wraps a possibly negative dim into [0, rank); InvalidArgument when out of range.
absl::StatusOr<int64_t> WrapDim(int64_t dim, int64_t rank);

/// `sizes` without its ones: a reshape between two lists of equal such sizes only adds or
/// drops size-1 dims.
std::vector<int64_t> NonUnitDims(const std::vector<int64_t>& sizes);

/// Resolves a reshape target (one -1 allowed) against `numel`.
absl::StatusOr<std::vector<int64_t>> ResolveReshape(const std::vector<int64_t>& target,
                                                    int64_t numel);

/// Resolves a reshape target of a tensor of symbolic sizes `input`: the target holds as many
/// elements as the input for every value of the symbols, the counts compared as products of
/// sizes and symbols ([B,T,768] to [B*T,768] or [B,T,12,64]; a -1 stands for the quotient,
/// B*T for [-1,768]). InvalidArgument where they differ or the quotient is not a product
/// (a -1 of [T,768] to [-1,2,768], T/2).
absl::StatusOr<std::vector<int64_t>> ResolveSymbolicReshape(const std::vector<int64_t>& target,
                                                            const std::vector<int64_t>& input);

/// How `v` takes part in type promotion (a constant node with attr wrapped=1 is a Python
/// scalar; other rank-0 values are zero-dim tensors).
OperandPriority PriorityOf(const Value* v);

/// The dtype that operands of an elementwise node are promoted to before computing
/// (for comparisons: the operands' common type, not bool).
DType ComputationDType(OpKind kind, const std::vector<Value*>& inputs, const Attrs& attrs);

/// A comparison of f16/bf16 values: a kernel computes its operands in f32, where eager
/// rounds them after every op (the code generator and RoundComparedValues round them).
bool ComparesHalves(const Node& n);

/// Sorted, wrapped reduction dims of a reduction node over an input of `rank` (empty attr =
/// every dim).
absl::StatusOr<std::vector<int64_t>> ReductionDims(const Attrs& attrs, int64_t rank);

/// The type of the single output of an op applied to `inputs` with `attrs`. Errors name the
/// op and the operand types. Not for kParam, kOpaque and kFusionGroup, whose types are given.
absl::StatusOr<TensorType> InferOutputType(OpKind kind, const std::vector<Value*>& inputs,
                                           const Attrs& attrs);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_SHAPE_H_
