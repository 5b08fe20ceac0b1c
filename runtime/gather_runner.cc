#include "runtime/gather_runner.h"

#include <algorithm>
#include <tuple>

#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/gather_kernel.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "common/status_macros.h"
#include "graph/dtype.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

namespace {

// The widest unit of a gather's copies that divides a row of `row_bytes` and `address` (the
// output's is 256 bytes), at least one element.
int GatherUnit(int64_t row_bytes, uintptr_t address, int element_bytes) {
  int unit = 16;
  while (unit > element_bytes && (row_bytes % unit != 0 || address % unit != 0)) unit /= 2;
  return unit;
}

int IndexBytes(graph::DType dtype) {
  return dtype == graph::DType::kI64 ? 8 : dtype == graph::DType::kI32 ? 4 : 0;
}

}  // namespace

bool GatherRunner::Takes(const graph::Node& n) {
  return IndexesRows(n) ||
         (n.kind() == graph::OpKind::kOpaque && n.HasAttr("target") &&
          n.StringAttr("target") == "aten::embedding" && n.inputs().size() == 2 &&
          n.num_outputs() == 1);
}

bool GatherRunner::IndexesRows(const graph::Node& n) {
  return n.kind() == graph::OpKind::kOpaque && n.HasAttr("index_rows") &&
         n.IntAttr("index_rows") == 1 && n.inputs().size() == 2 && n.num_outputs() == 1;
}

absl::StatusOr<std::optional<at::Tensor>> GatherRunner::Run(const at::Tensor& table,
                                                            const at::Tensor& indices,
                                                            bool negative_from_end) {
  // An embedding's table has two dims (torch checks it); a tensor indexed by rows any number.
  if (!table.is_cuda() || !indices.is_cuda() || table.device() != indices.device() ||
      table.dim() < 1 || (!negative_from_end && table.dim() != 2) || !table.is_contiguous() ||
      !indices.is_contiguous() || table.is_conj() || table.is_neg() || table.numel() == 0 ||
      indices.numel() == 0 ||
      (indices.scalar_type() != at::kLong && indices.scalar_type() != at::kInt)) {
    return std::optional<at::Tensor>();
  }
  std::vector<int64_t> sizes(indices.sizes().begin(), indices.sizes().end());
  sizes.insert(sizes.end(), table.sizes().begin() + 1, table.sizes().end());
  at::Tensor out = at::empty(sizes, table.options());
  // The widest unit that divides a row and the table's alignment (the output's is 256 bytes).
  const int64_t row_bytes = table.numel() / table.size(0) * table.element_size();
  const int unit = GatherUnit(row_bytes, reinterpret_cast<uintptr_t>(table.data_ptr()),
                              static_cast<int>(table.element_size()));
  const int index_bytes = static_cast<int>(indices.element_size());
  const void* table_ptr = table.data_ptr();
  const void* index_ptr = indices.data_ptr();
  void* out_ptr = out.data_ptr();
  int64_t n = indices.numel(), units = row_bytes / unit, rows = table.size(0);
  void* args[] = {&table_ptr, &index_ptr, &out_ptr, &n, &units, &rows};
  TF_RETURN_IF_ERROR(Launch(
      negative_from_end ? kIndexRows : kGather, unit, index_bytes, table.device(),
      [&] { return codegen::EmitGatherKernel(unit, index_bytes, negative_from_end); },
      n * units, args));
  return std::optional<at::Tensor>(out);
}

void GatherRunner::Warm(const graph::Node& n, const at::Device& device) const {
  if (!device.is_cuda() || n.inputs().size() < 2) return;
  const graph::TensorType& table = n.input(0)->type();
  const int element_bytes = graph::DTypeSize(table.dtype);
  const int index_bytes = IndexBytes(n.input(1)->type().dtype);
  absl::StatusOr<codegen::KernelSource> kernel = absl::InternalError("not an index node");
  int64_t row = 1;  // the elements of a table's row; 0 where one of its dims is symbolic
  for (size_t d = 1; d < table.sizes.size(); ++d) {
    row = graph::IsSymbolic(table.sizes[d]) ? 0 : row * table.sizes[d];
  }
  const bool rows = IndexesRows(n);
  if (Takes(n) && row > 0 && (rows ? table.rank() >= 1 : table.rank() == 2)) {
    // torch's allocations are aligned to at least 256 bytes.
    kernel = codegen::EmitGatherKernel(GatherUnit(row * element_bytes, /*address=*/0,
                                                  element_bytes),
                                       index_bytes, rows);
  } else if (TakesScatterAdd(n)) {
    kernel = codegen::EmitScatterAddKernel(element_bytes, index_bytes);
  }
  if (!kernel.ok()) return;  // an index type the kernels do not take, among others
  absl::StatusOr<codegen::DeviceInfo> info = codegen::GetDeviceInfo(OrdinalOf(device));
  if (info.ok()) codegen::CompileAhead(std::move(*kernel), info->arch, env_.disk);
}

bool GatherRunner::TakesScatterAdd(const graph::Node& n) {
  if (n.kind() != graph::OpKind::kOpaque || !n.HasAttr("scatter_add") ||
      n.IntAttr("scatter_add") != 1 || n.inputs().size() != 3 || n.num_outputs() != 1) {
    return false;
  }
  // The kernel's atomic adds: f32 or f64 rows, values of the same dtype.
  const graph::DType dtype = n.input(0)->type().dtype;
  return (dtype == graph::DType::kF32 || dtype == graph::DType::kF64) &&
         n.input(2)->type().dtype == dtype;
}

std::optional<double> GatherRunner::UniformValue(const graph::Value* v) {
  while (v != nullptr && v->producer() != nullptr) {
    const graph::Node* p = v->producer();
    if (p->kind() == graph::OpKind::kConstant) return p->NumberAttr("value");
    if (p->kind() != graph::OpKind::kExpand && p->kind() != graph::OpKind::kReshape &&
        p->kind() != graph::OpKind::kUnsqueeze && p->kind() != graph::OpKind::kSqueeze &&
        p->kind() != graph::OpKind::kContiguous) {
      return std::nullopt;
    }
    v = p->input(0);
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<at::Tensor>> GatherRunner::ScatterAdd(const at::Tensor& self,
                                                                   const at::Tensor& indices,
                                                                   const at::Tensor& values,
                                                                   std::optional<double> fill) {
  const bool takes =
      self.is_cuda() && indices.is_cuda() && values.is_cuda() &&
      self.device() == indices.device() && self.device() == values.device() &&
      self.dim() >= 1 && values.is_contiguous() &&
      indices.is_contiguous() && !self.is_conj() && !self.is_neg() && !values.is_conj() &&
      !values.is_neg() && self.scalar_type() == values.scalar_type() &&
      (self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble) &&
      (indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt) &&
      self.numel() > 0 && indices.numel() > 0 &&
      !at::globalContext().deterministicAlgorithms();
  if (!takes) return std::optional<at::Tensor>();
  // values: the indices' sizes, then self's row (no broadcasting).
  const at::IntArrayRef v = values.sizes();
  if (v.size() != indices.sizes().size() + self.sizes().size() - 1 ||
      v.slice(0, indices.dim()) != indices.sizes() ||
      v.slice(indices.dim()) != self.sizes().slice(1)) {
    return std::optional<at::Tensor>();
  }
  // Any layout of self (zeros_like's constant is an expanded scalar): the copy is contiguous.
  at::Tensor out = fill ? at::full(self.sizes(), *fill, self.options())
                        : self.clone(at::MemoryFormat::Contiguous);
  const int element_bytes = static_cast<int>(self.element_size());
  const int index_bytes = static_cast<int>(indices.element_size());
  const void* index_ptr = indices.data_ptr();
  const void* values_ptr = values.data_ptr();
  void* out_ptr = out.data_ptr();
  int64_t n = indices.numel(), row = self.numel() / self.size(0), rows = self.size(0);
  void* args[] = {&index_ptr, &values_ptr, &out_ptr, &n, &row, &rows};
  TF_RETURN_IF_ERROR(Launch(kScatterAdd, element_bytes, index_bytes, self.device(),
                            [&] { return codegen::EmitScatterAddKernel(element_bytes, index_bytes); },
                            n * row, args));
  return std::optional<at::Tensor>(out);
}

absl::Status GatherRunner::Launch(
    Kind kind, int a, int b, const at::Device& device,
    const std::function<absl::StatusOr<codegen::KernelSource>()>& emit, int64_t total,
    void** args) {
  const int ordinal = OrdinalOf(device);
  auto& kernel = kernels_[std::make_tuple(static_cast<int>(kind), ordinal, a, b)];
  if (kernel == nullptr) {
    TF_ASSIGN_OR_RETURN(codegen::KernelSource source, emit());
    TF_ASSIGN_OR_RETURN(kernel, codegen::GetOrLoad(source, ordinal, env_.disk.get()));
  }
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 8192);
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(ordinal));
  return kernel->Launch(static_cast<unsigned>(blocks), 256, args, CurrentStream(device));
}

}  // namespace torchfuse::runtime
