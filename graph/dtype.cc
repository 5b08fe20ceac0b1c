#include "graph/dtype.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace torchfuse::graph {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kBool}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected f32, f16, bf16, f64, i64, i32 or bool)"));
}

int DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kBool: return 1;
  }
  return 0;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64;
}

bool IsIntegral(DType dtype) { return dtype == DType::kI64 || dtype == DType::kI32; }

bool IsHalf(DType dtype) { return dtype == DType::kF16 || dtype == DType::kBF16; }

DType ComputeDType(DType dtype) { return IsHalf(dtype) ? DType::kF32 : dtype; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  const bool fa = IsFloating(a), fb = IsFloating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return (a == DType::kI64 || b == DType::kI64) ? DType::kI64 : DType::kI32;
  // Both floating and different.
  if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
  if (a == DType::kF32 || b == DType::kF32) return DType::kF32;
  return DType::kF32;  // f16 with bf16
}

namespace {

using Slot = std::optional<DType>;

Slot PromoteSkipUndefined(Slot a, Slot b) {
  if (!a) return b;
  if (!b) return a;
  return PromoteTypes(*a, *b);
}

// ATen's combine_categories(higher, lower) without complex types.
Slot CombineCategories(Slot higher, Slot lower) {
  if (higher && IsFloating(*higher)) return higher;
  if ((higher && *higher == DType::kBool) || (lower && IsFloating(*lower))) {
    return PromoteSkipUndefined(higher, lower);
  }
  return higher ? higher : lower;
}

}  // namespace

DType ResultType(const std::vector<PromotionOperand>& operands) {
  Slot dim, zero, wrapped;
  for (const PromotionOperand& op : operands) {
    switch (op.priority) {
      case OperandPriority::kDimensioned:
        dim = PromoteSkipUndefined(dim, op.dtype);
        break;
      case OperandPriority::kZeroDim:
        zero = PromoteSkipUndefined(zero, op.dtype);
        break;
      case OperandPriority::kWrappedScalar: {
        // Wrapped numbers take the default dtype of their category.
        DType d = op.dtype;
        if (IsFloating(d)) d = DType::kF32;
        else if (IsIntegral(d)) d = DType::kI64;
        wrapped = PromoteSkipUndefined(wrapped, d);
        break;
      }
    }
  }
  Slot r = CombineCategories(dim, CombineCategories(zero, wrapped));
  return r ? *r : DType::kF32;
}

}  // namespace torchfuse::graph
