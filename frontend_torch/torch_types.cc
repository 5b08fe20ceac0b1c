#include "frontend_torch/torch_types.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace torchfuse::frontend {

using graph::DType;

at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF64: return at::kDouble;
    case DType::kI64: return at::kLong;
    case DType::kI32: return at::kInt;
    case DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

absl::StatusOr<DType> FromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kF32;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kDouble: return DType::kF64;
    case at::kLong: return DType::kI64;
    case at::kInt: return DType::kI32;
    case at::kBool: return DType::kBool;
    default:
      return absl::UnimplementedError(
          absl::StrCat("unsupported dtype ", c10::toString(type)));
  }
}

absl::StatusOr<graph::TensorType> TensorTypeOf(const at::Tensor& t) {
  TF_ASSIGN_OR_RETURN(DType d, FromScalarType(t.scalar_type()));
  return graph::TensorType{d, std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
}

absl::StatusOr<std::shared_ptr<const graph::TensorData>> CaptureTensor(const at::Tensor& t) {
  TF_ASSIGN_OR_RETURN(graph::TensorType type, TensorTypeOf(t));
  auto data = std::make_shared<graph::TensorData>();
  data->type = std::move(type);
  data->held = std::make_shared<const at::Tensor>(t.detach());
  return std::shared_ptr<const graph::TensorData>(std::move(data));
}

at::Tensor TensorFromData(const graph::TensorData& data, at::Device device) {
  if (data.held) {
    // The tensor itself where it is usable as it is: no copy, and its memory stays the one
    // the module owns.
    const at::Tensor& t = *static_cast<const at::Tensor*>(data.held.get());
    return t.to(device).contiguous();
  }
  at::Tensor t = at::empty(data.type.sizes, at::TensorOptions().dtype(ToScalarType(data.type.dtype)));
  if (!data.bytes.empty()) std::memcpy(t.data_ptr(), data.bytes.data(), data.bytes.size());
  return t.to(device);
}

at::Tensor RandomTensor(const graph::TensorType& type, at::Device device) {
  auto opts = at::TensorOptions().device(device);
  if (graph::IsFloating(type.dtype)) {
    return at::randn(type.sizes, opts.dtype(at::kFloat)).to(ToScalarType(type.dtype));
  }
  if (type.dtype == DType::kBool) return at::rand(type.sizes, opts.dtype(at::kFloat)) > 0.5;
  // Integers are valid indices into any table of 8 rows or more (embedding lookups, token ids).
  return at::randint(0, 8, type.sizes, opts.dtype(ToScalarType(type.dtype)));
}

}  // namespace torchfuse::frontend
