#include "runtime/gather_runner.h"

#include <algorithm>
#include <tuple>

#include "codegen_nvrtc/gather_kernel.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "common/status_macros.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

bool GatherRunner::Takes(const graph::Node& n) {
  return n.kind() == graph::OpKind::kOpaque && n.HasAttr("target") &&
         n.StringAttr("target") == "aten::embedding" && n.inputs().size() == 2 &&
         n.num_outputs() == 1;
}

absl::StatusOr<std::optional<at::Tensor>> GatherRunner::Run(const at::Tensor& table,
                                                            const at::Tensor& indices) {
  if (!table.is_cuda() || !indices.is_cuda() || table.device() != indices.device() ||
      table.dim() != 2 || !table.is_contiguous() || !indices.is_contiguous() ||
      table.is_conj() || table.is_neg() || table.numel() == 0 || indices.numel() == 0 ||
      (indices.scalar_type() != at::kLong && indices.scalar_type() != at::kInt)) {
    return std::optional<at::Tensor>();
  }
  std::vector<int64_t> sizes(indices.sizes().begin(), indices.sizes().end());
  sizes.push_back(table.size(1));
  at::Tensor out = at::empty(sizes, table.options());
  // The widest unit that divides a row and the table's alignment (the output's is 256 bytes).
  const int64_t row_bytes = table.size(1) * table.element_size();
  const uintptr_t address = reinterpret_cast<uintptr_t>(table.data_ptr());
  int unit = 16;
  while (unit > table.element_size() && (row_bytes % unit != 0 || address % unit != 0)) unit /= 2;
  const int index_bytes = static_cast<int>(indices.element_size());
  const int ordinal = table.device().index() < 0 ? 0 : table.device().index();
  auto& kernel = kernels_[std::make_tuple(ordinal, unit, index_bytes)];
  if (kernel == nullptr) {
    TF_ASSIGN_OR_RETURN(codegen::KernelSource source, codegen::EmitGatherKernel(unit, index_bytes));
    TF_ASSIGN_OR_RETURN(kernel, codegen::GetOrLoad(source, ordinal, env_.disk.get()));
  }
  const void* table_ptr = table.data_ptr();
  const void* index_ptr = indices.data_ptr();
  void* out_ptr = out.data_ptr();
  int64_t n = indices.numel(), units = row_bytes / unit, rows = table.size(0);
  void* args[] = {&table_ptr, &index_ptr, &out_ptr, &n, &units, &rows};
  const int64_t blocks = std::min<int64_t>((n * units + 255) / 256, 8192);
  TF_RETURN_IF_ERROR(codegen::MakeContextCurrent(ordinal));
  TF_RETURN_IF_ERROR(kernel->Launch(static_cast<unsigned>(blocks), 256, args,
                                    CurrentStream(table.device())));
  return std::optional<at::Tensor>(out);
}

bool GatherRunner::TakesScatterAdd(const graph::Node& n) {
  return n.kind() == graph::OpKind::kOpaque && n.HasAttr("scatter_add") &&
         n.IntAttr("scatter_add") == 1 && n.inputs().size() == 3 && n.num_outputs() == 1;
}

absl::StatusOr<std::optional<at::Tensor>> GatherRunner::ScatterAdd(const at::Tensor& self,
                                                                   const at::Tensor& indices,
                                                                   const at::Tensor& values) {
  const bool takes =
      self.is_cuda() && indices.is_cuda() && values.is_cuda() &&
      self.device() == indices.device() && self.device() == values.device() &&
      self.dim() >= 1 && self.is_contiguous() && values.is_contiguous() &&
      indices.is_contiguous() && !self.is_conj() && !self.is_neg() && !values.is_conj() &&
      !values.is_neg() && self.scalar_type() == values.scalar_type() &&
      (self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble) &&
      (indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt) &&
      self.numel() > 0 && indices.numel() > 0 &&
      !at::globalContext().deterministicAlgorithms();
  if (!takes) return std::optional<at::Tensor>();
  // values: the indices' sizes, then self's row (no broadcasting).
  std::vector<int64_t> want(indices.sizes().begin(), indices.sizes().end());
  want.insert(want.end(), self.sizes().begin() + 1, self.sizes().end());
  if (values.sizes() != at::IntArrayRef(want)) return std::optional<at::Tensor>();
  at::Tensor out = self.clone();
  const int element_bytes = static_cast<int>(self.element_size());
  const int index_bytes = static_cast<int>(indices.element_size());
  const int ordinal = self.device().index() < 0 ? 0 : self.device().index();
  auto& kernel = scatters_[std::make_tuple(ordinal, element_bytes, index_bytes)];
  if (kernel == nullptr) {
    TF_ASSIGN_OR_RETURN(codegen::KernelSource source,
                        codegen::EmitScatterAddKernel(element_bytes, index_bytes));
    TF_ASSIGN_OR_RETURN(kernel, codegen::GetOrLoad(source, ordinal, env_.disk.get()));
  }
  const void* index_ptr = indices.data_ptr();
  const void* values_ptr = values.data_ptr();
  void* out_ptr = out.data_ptr();
  int64_t n = indices.numel(), row = self.numel() / self.size(0), rows = self.size(0);
  void* args[] = {&index_ptr, &values_ptr, &out_ptr, &n, &row, &rows};
  const int64_t blocks = std::min<int64_t>((n * row + 255) / 256, 8192);
  TF_RETURN_IF_ERROR(codegen::MakeContextCurrent(ordinal));
  TF_RETURN_IF_ERROR(kernel->Launch(static_cast<unsigned>(blocks), 256, args,
                                    CurrentStream(self.device())));
  return std::optional<at::Tensor>(out);
}

}  // namespace torchfuse::runtime
