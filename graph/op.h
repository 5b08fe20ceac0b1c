// The IR's ops, generated from the table in ops.def.
#ifndef TORCHFUSE_GRAPH_OP_H_
#define TORCHFUSE_GRAPH_OP_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace torchfuse::graph {

/// What kind of computation an op is; fusion and codegen dispatch on this.
enum class OpCategory {
  kSource,         // constant, param
  kUnary,          // elementwise, one operand
  kBinary,         // elementwise, two operands, result of promoted type
  kCompare,        // elementwise, two operands, bool result
  kTernary,        // where
  kReduction,      // sum, mean, amax, amin, var
  kNormalization,  // softmax, log_softmax, layer_norm
  kMatmul,         // matmul, linear, addmm
  kLayout,         // reshape, unsqueeze, ...: indexing only
  kOpaque,         // run by torch
  kFusionGroup,    // a subgraph compiled as one kernel
};

/// Every op of the IR.
enum class OpKind {
#define TF_OP(e, name, cat, arity, cuda, ref) e,
#include "graph/ops.def"
#undef TF_OP
};

/// The values of a matrix product's attribute `epilogue` (addmm, or linear with a bias): GELU's
/// tanh form, or ReLU, applied to the biased product before it is stored
/// (fusion::FuseMatmulEpilogues).
inline constexpr char kGeluTanhEpilogue[] = "gelu_tanh";
inline constexpr char kReluEpilogue[] = "relu";

/// Number of ops in the table.
int NumOpKinds();
/// Text name of the op ("add").
const char* OpName(OpKind kind);
/// The op named `name`, if any.
std::optional<OpKind> OpKindFromName(absl::string_view name);
/// Category of the op.
OpCategory OpCategoryOf(OpKind kind);
/// Number of inputs, or -1 if it varies.
int OpArity(OpKind kind);
/// CUDA expression template of an elementwise op ("" for others).
const char* OpCudaExpr(OpKind kind);
/// One-line description of the op's semantics, in PyTorch terms.
const char* OpReference(OpKind kind);
/// True for unary, binary, compare and ternary ops.
bool IsElementwise(OpKind kind);
/// True for unary ops that produce a floating result from integral input (exp, tanh, ...).
bool IsFloatOnlyUnary(OpKind kind);
/// True for the reductions fused kernels compute in one pass: sum, mean, amax and amin (var
/// is decomposed first).
bool IsOnePassReduction(OpKind kind);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_OP_H_
