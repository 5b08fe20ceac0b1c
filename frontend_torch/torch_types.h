// Conversions between the IR's types and LibTorch's.
#ifndef TORCHFUSE_FRONTEND_TORCH_TORCH_TYPES_H_
#define TORCHFUSE_FRONTEND_TORCH_TORCH_TYPES_H_

#include <ATen/ATen.h>

#include <memory>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::frontend {

/// The ATen scalar type of an IR dtype.
at::ScalarType ToScalarType(graph::DType dtype);
/// The IR dtype of an ATen scalar type; Unimplemented (naming the type) for others.
absl::StatusOr<graph::DType> FromScalarType(at::ScalarType type);
/// The IR type of a tensor (its dtype and sizes).
absl::StatusOr<graph::TensorType> TensorTypeOf(const at::Tensor& t);
/// TensorData of a tensor known at import: the tensor itself, held (no copy of its values).
absl::StatusOr<std::shared_ptr<const graph::TensorData>> CaptureTensor(const at::Tensor& t);
/// The contiguous tensor of `data` on `device`: a held tensor itself where it is contiguous and
/// on `device` (no copy), else a copy made there.
at::Tensor TensorFromData(const graph::TensorData& data, at::Device device);
/// A fresh tensor of `type` filled with random values (normal for floats, ints in [0, 8), random
/// bools), on `device`.
at::Tensor RandomTensor(const graph::TensorType& type, at::Device device);

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_TORCH_TYPES_H_
