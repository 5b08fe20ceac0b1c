// Element types and PyTorch's type-promotion rules.
#ifndef TORCHFUSE_GRAPH_DTYPE_H_
#define TORCHFUSE_GRAPH_DTYPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchfuse::graph {

/// Element types of the IR. Names in text form: f32 f16 bf16 f64 i64 i32 bool.
enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kBool };

/// Short text name ("bf16").
const char* DTypeName(DType dtype);
/// Inverse of DTypeName; InvalidArgument for an unknown name.
absl::StatusOr<DType> ParseDType(absl::string_view name);
/// Size of one element in bytes.
int DTypeSize(DType dtype);
/// True for f32, f16, bf16, f64.
bool IsFloating(DType dtype);
/// True for i64 and i32 (bool is neither integral nor floating).
bool IsIntegral(DType dtype);
/// True for f16 and bf16 (stored in 16 bits, computed in f32).
bool IsHalf(DType dtype);
/// The type that computes a value of `dtype` in generated code: f16/bf16 compute in f32.
DType ComputeDType(DType dtype);

/// PyTorch's promoteTypes for two dtypes (the lattice, ignoring operand priority).
DType PromoteTypes(DType a, DType b);

/// How an operand takes part in type promotion, as in ATen's ResultTypeState: tensors with
/// dimensions decide first, then zero-dim tensors, then wrapped Python scalars.
enum class OperandPriority { kDimensioned, kZeroDim, kWrappedScalar };

/// One operand's dtype and priority.
struct PromotionOperand {
  DType dtype;
  OperandPriority priority;
};

/// PyTorch's result_type over operands (ATen's update_result_type_state + result_type).
/// A wrapped float scalar counts as f32 (the default dtype), a wrapped int as i64.
DType ResultType(const std::vector<PromotionOperand>& operands);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_DTYPE_H_
