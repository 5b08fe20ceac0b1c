#include "runtime/group_runner.h"

#include <algorithm>

#include "codegen_nvrtc/kernel_cache.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

using codegen::LaunchLayout;
using codegen::TensorView;

absl::StatusOr<std::unique_ptr<GroupRunner>> GroupRunner::Create(const graph::Node& group,
                                                                 int block_size, int unroll) {
  TF_ASSIGN_OR_RETURN(codegen::GroupIndexing indexing, codegen::AnalyzeIndexing(*group.body()));
  return std::unique_ptr<GroupRunner>(
      new GroupRunner(group, std::move(indexing), block_size, unroll));
}

GroupRunner::GroupRunner(const graph::Node& group, codegen::GroupIndexing indexing,
                         int block_size, int unroll)
    : group_(group),
      indexing_(std::move(indexing)),
      name_(group.HasAttr("name") ? group.StringAttr("name") : "fused"),
      block_size_(block_size),
      unroll_(unroll) {}

absl::StatusOr<codegen::KernelSource> GroupRunner::Source(const codegen::KernelLayout& layout) {
  const std::string sig = layout.Signature();
  auto it = sources_.find(sig);
  if (it != sources_.end()) return it->second;
  TF_ASSIGN_OR_RETURN(codegen::KernelSource src,
                      codegen::EmitElementwiseKernel(*group_.body(), indexing_, layout, name_,
                                                     block_size_));
  return sources_.emplace(sig, std::move(src)).first->second;
}

LaunchLayout GroupRunner::Layout(const std::vector<at::Tensor>& inputs,
                                 const std::vector<at::Tensor>& outputs) const {
  std::vector<TensorView> views;
  for (const at::Tensor& t : inputs) {
    views.push_back({std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                     std::vector<int64_t>(t.strides().begin(), t.strides().end()),
                     reinterpret_cast<uintptr_t>(t.data_ptr()), static_cast<int>(t.element_size())});
  }
  std::vector<int> out_sizes;
  std::vector<uintptr_t> out_addresses;
  for (const at::Tensor& t : outputs) {
    out_sizes.push_back(static_cast<int>(t.element_size()));
    out_addresses.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()));
  }
  return codegen::ComputeLayout(indexing_, views, out_sizes, out_addresses);
}

LaunchLayout GroupRunner::DefaultLayout() const {
  std::vector<TensorView> views;
  for (const auto& in : group_.body()->inputs()) {
    const std::vector<int64_t>& sizes = in->type().sizes;
    std::vector<int64_t> strides(sizes.size(), 1);
    for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) {
      strides[k] = strides[k + 1] * sizes[k + 1];
    }
    views.push_back({sizes, strides, 0, graph::DTypeSize(in->type().dtype)});
  }
  std::vector<int> out_sizes;
  for (const graph::Value* v : group_.body()->outputs()) {
    out_sizes.push_back(graph::DTypeSize(v->type().dtype));
  }
  return codegen::ComputeLayout(indexing_, views, out_sizes,
                                std::vector<uintptr_t>(out_sizes.size(), 0));
}

absl::StatusOr<std::vector<at::Tensor>> GroupRunner::Run(const std::vector<at::Tensor>& inputs) {
  const at::Device device = inputs.empty() ? at::Device(at::kCUDA, 0) : inputs[0].device();
  std::vector<at::Tensor> outputs;
  for (const graph::Value* v : group_.body()->outputs()) {
    outputs.push_back(at::empty(v->type().sizes, at::TensorOptions()
                                                     .dtype(frontend::ToScalarType(v->type().dtype))
                                                     .device(device)));
  }
  LaunchLayout layout = Layout(inputs, outputs);
  if (layout.numel == 0) return outputs;
  if (unroll_ > 0 && layout.kernel.vec > 1) layout.kernel.unroll = unroll_;
  const int ordinal = device.index() < 0 ? 0 : device.index();
  std::shared_ptr<const codegen::LoadedKernel> kernel;
  for (const Ready& r : ready_) {
    if (r.ordinal == ordinal && r.layout == layout.kernel) kernel = r.kernel;
  }
  if (kernel == nullptr) {
    TF_ASSIGN_OR_RETURN(codegen::KernelSource src, Source(layout.kernel));
    TF_ASSIGN_OR_RETURN(kernel, codegen::GetOrLoad(src, ordinal));
    ready_.push_back({layout.kernel, ordinal, kernel});
  }
  std::vector<void*> pointers;
  for (const at::Tensor& t : inputs) pointers.push_back(t.data_ptr());
  for (const at::Tensor& t : outputs) pointers.push_back(t.data_ptr());
  std::vector<uint8_t> params = layout.ParamBlock();
  std::vector<void*> args;
  for (void*& p : pointers) args.push_back(&p);
  args.push_back(params.data());
  // One block per block_size * unroll chunks; the kernel's grid-stride loop covers any rest.
  const int64_t work = layout.kernel.vec > 1 ? std::max<int64_t>(layout.numel / layout.kernel.vec, 1)
                                             : layout.numel;
  const int64_t per_block = static_cast<int64_t>(block_size_) *
                            (layout.kernel.vec > 1 ? layout.kernel.unroll : 1);
  const int64_t blocks = std::min<int64_t>((work + per_block - 1) / per_block, (1LL << 31) - 1);
  TF_RETURN_IF_ERROR(codegen::MakeContextCurrent(ordinal));
  TF_RETURN_IF_ERROR(kernel->Launch(static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
                                    static_cast<unsigned>(block_size_), args.data(),
                                    CurrentStream(device)));
  return outputs;
}

}  // namespace torchfuse::runtime
