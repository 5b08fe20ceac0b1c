#include "runtime/group_runner.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <optional>

#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/row_kernel.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

using codegen::LaunchLayout;
using codegen::TensorView;

codegen::TensorView ViewOf(const at::Tensor& t) {
  return {std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
          std::vector<int64_t>(t.strides().begin(), t.strides().end()),
          reinterpret_cast<uintptr_t>(t.data_ptr()), static_cast<int>(t.element_size())};
}

GroupRunner::GroupRunner(const graph::Node& group)
    : group_(group), name_(group.HasAttr("name") ? group.StringAttr("name") : "fused") {}

const std::string& GroupRunner::last_kernel() const {
  static const std::string* const kNone = new std::string();
  return last_kernel_ != nullptr ? *last_kernel_ : *kNone;
}

std::vector<at::Tensor> GroupRunner::AllocateOutputs(const at::Device& device) const {
  std::vector<at::Tensor> outputs;
  for (const graph::Value* v : group_.body()->outputs()) {
    outputs.push_back(at::empty(v->type().sizes, at::TensorOptions()
                                                     .dtype(frontend::ToScalarType(v->type().dtype))
                                                     .device(device)));
  }
  return outputs;
}

std::vector<TensorView> GroupRunner::DefaultInputViews() const {
  std::vector<TensorView> views;
  for (const auto& in : group_.body()->inputs()) {
    const std::vector<int64_t>& sizes = in->type().sizes;
    std::vector<int64_t> strides(sizes.size(), 1);
    for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) {
      strides[k] = strides[k + 1] * sizes[k + 1];
    }
    views.push_back({sizes, strides, 0, graph::DTypeSize(in->type().dtype)});
  }
  return views;
}

namespace {

// What the layout computations take of a call's tensors.
struct CallViews {
  CallViews(const std::vector<at::Tensor>& in, const std::vector<at::Tensor>& out) {
    for (const at::Tensor& t : in) inputs.push_back(ViewOf(t));
    for (const at::Tensor& t : out) {
      output_sizes.push_back(static_cast<int>(t.element_size()));
      output_addresses.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()));
    }
  }
  std::vector<TensorView> inputs;
  std::vector<int> output_sizes;
  std::vector<uintptr_t> output_addresses;
};

std::vector<void*> KernelArgs(const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Tensor>& outputs,
                              std::vector<void*>* pointers, std::vector<uint8_t>* params) {
  for (const at::Tensor& t : inputs) pointers->push_back(t.data_ptr());
  for (const at::Tensor& t : outputs) pointers->push_back(t.data_ptr());
  std::vector<void*> args;
  for (void*& p : *pointers) args.push_back(&p);
  args.push_back(params->data());
  return args;
}

// ---------------------------------------------------------------------------------------------

class ElementwiseRunner : public GroupRunner {
 public:
  ElementwiseRunner(const graph::Node& group, codegen::GroupIndexing indexing, int block_size,
                    int unroll)
      : GroupRunner(group), indexing_(std::move(indexing)), block_size_(block_size),
        unroll_(unroll) {}

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    const at::Device device = inputs.empty() ? at::Device(at::kCUDA, 0) : inputs[0].device();
    std::vector<at::Tensor> outputs = AllocateOutputs(device);
    const CallViews call(inputs, outputs);
    LaunchLayout layout = codegen::ComputeLayout(indexing_, call.inputs, call.output_sizes,
                                                 call.output_addresses);
    if (layout.numel == 0) return outputs;
    if (unroll_ > 0 && layout.kernel.vec > 1) layout.kernel.unroll = unroll_;
    const int ordinal = device.index() < 0 ? 0 : device.index();
    const Ready* ready = nullptr;
    for (const Ready& r : ready_) {
      if (r.ordinal == ordinal && r.layout == layout.kernel) ready = &r;
    }
    if (ready == nullptr) {
      TF_ASSIGN_OR_RETURN(codegen::KernelSource src, Source(layout.kernel));
      TF_ASSIGN_OR_RETURN(auto kernel, codegen::GetOrLoad(src, ordinal));
      ready_.push_back({layout.kernel, ordinal, kernel, src.name});
      ready = &ready_.back();
    }
    std::vector<void*> pointers;
    std::vector<uint8_t> params = layout.ParamBlock();
    std::vector<void*> args = KernelArgs(inputs, outputs, &pointers, &params);
    // One block per block_size * unroll chunks; the kernel's grid-stride loop covers any rest.
    const int64_t work = layout.kernel.vec > 1
                             ? std::max<int64_t>(layout.numel / layout.kernel.vec, 1)
                             : layout.numel;
    const int64_t per_block = static_cast<int64_t>(block_size_) *
                              (layout.kernel.vec > 1 ? layout.kernel.unroll : 1);
    const int64_t blocks = std::min<int64_t>((work + per_block - 1) / per_block, (1LL << 31) - 1);
    TF_RETURN_IF_ERROR(codegen::MakeContextCurrent(ordinal));
    TF_RETURN_IF_ERROR(ready->kernel->Launch(static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
                                             static_cast<unsigned>(block_size_), args.data(),
                                             CurrentStream(device)));
    last_kernel_ = &ready->name;
    return outputs;
  }

  absl::StatusOr<codegen::KernelSource> DefaultSource(int) override {
    std::vector<int> out_sizes;
    for (const graph::Value* v : group_.body()->outputs()) {
      out_sizes.push_back(graph::DTypeSize(v->type().dtype));
    }
    LaunchLayout layout = codegen::ComputeLayout(indexing_, DefaultInputViews(), out_sizes,
                                                 std::vector<uintptr_t>(out_sizes.size(), 0));
    return Source(layout.kernel);
  }

 private:
  absl::StatusOr<codegen::KernelSource> Source(const codegen::KernelLayout& layout) {
    return codegen::EmitElementwiseKernel(*group_.body(), indexing_, layout, name_, block_size_);
  }

  const codegen::GroupIndexing indexing_;
  const int block_size_;
  const int unroll_;  // 0: as ComputeLayout chose
  // The kernels met so far, looked up without building any string.
  struct Ready {
    codegen::KernelLayout layout;
    int ordinal;
    std::shared_ptr<const codegen::LoadedKernel> kernel;
    std::string name;
  };
  std::deque<Ready> ready_;  // a deque: last_kernel_ points into it
};

// ---------------------------------------------------------------------------------------------

class RowRunner : public GroupRunner {
 public:
  RowRunner(const graph::Node& group, codegen::RowIndexing indexing,
            std::optional<codegen::RowStrategy> forced, std::optional<codegen::RowVariant> variant)
      : GroupRunner(group), indexing_(std::move(indexing)), forced_(forced), variant_(variant) {
    for (int64_t d : indexing_.domain) empty_ |= d == 0;
  }

  absl::StatusOr<std::vector<at::Tensor>> Run(const std::vector<at::Tensor>& inputs) override {
    if (empty_) return absl::UnimplementedError("row kernel: empty rows or no rows");
    const at::Device device = inputs.empty() ? at::Device(at::kCUDA, 0) : inputs[0].device();
    std::vector<at::Tensor> outputs = AllocateOutputs(device);
    const CallViews call(inputs, outputs);
    codegen::RowLaunch launch =
        codegen::ComputeRowLaunch(indexing_, call.inputs, call.output_sizes, call.output_addresses);
    const int ordinal = device.index() < 0 ? 0 : device.index();
    // The variant follows from the layout, the device and the shape (fixed for a runner), so
    // it is chosen only when a layout is met the first time.
    const Ready* ready = nullptr;
    for (const Ready& r : ready_) {
      if (r.ordinal == ordinal && r.layout == launch.layout) ready = &r;
    }
    if (ready == nullptr) {
      TF_ASSIGN_OR_RETURN(codegen::DeviceInfo info, codegen::GetDeviceInfo(ordinal));
      const codegen::RowVariant variant = Choose(launch, {info.arch, info.multiprocessors});
      TF_ASSIGN_OR_RETURN(codegen::KernelSource src,
                          codegen::EmitRowKernel(*group_.body(), indexing_, launch.layout, variant,
                                                 name_));
      TF_ASSIGN_OR_RETURN(auto kernel, codegen::GetOrLoad(src, ordinal));
      ready_.push_back({launch.layout, variant, ordinal, kernel, src.name});
      ready = &ready_.back();
    }
    std::vector<void*> pointers;
    std::vector<uint8_t> params = launch.ParamBlock();
    std::vector<void*> args = KernelArgs(inputs, outputs, &pointers, &params);
    const int64_t grid = ready->variant.GridSize(launch.rows);
    if (grid > (1LL << 31) - 1) return absl::UnimplementedError("row kernel: too many rows");
    TF_RETURN_IF_ERROR(codegen::MakeContextCurrent(ordinal));
    TF_RETURN_IF_ERROR(ready->kernel->Launch(static_cast<unsigned>(grid),
                                             static_cast<unsigned>(ready->variant.block_size()),
                                             args.data(), CurrentStream(device)));
    last_kernel_ = &ready->name;
    return outputs;
  }

  absl::StatusOr<codegen::KernelSource> DefaultSource(int arch) override {
    std::vector<int> out_sizes;
    for (const graph::Value* v : group_.body()->outputs()) {
      out_sizes.push_back(graph::DTypeSize(v->type().dtype));
    }
    codegen::RowLaunch launch =
        codegen::ComputeRowLaunch(indexing_, DefaultInputViews(), out_sizes,
                                  std::vector<uintptr_t>(out_sizes.size(), 0));
    codegen::RowDevice device;
    device.arch = arch;
    const codegen::RowVariant variant = Choose(launch, device);
    return codegen::EmitRowKernel(*group_.body(), indexing_, launch.layout, variant, name_);
  }

 private:
  // The given variant where it fits the launch, else the heuristic's (of the given strategy).
  codegen::RowVariant Choose(const codegen::RowLaunch& launch, const codegen::RowDevice& device) {
    if (variant_ && codegen::RowVariantFits(*variant_, indexing_.row_length, launch.layout.vec,
                                            device)) {
      return *variant_;
    }
    return codegen::ChooseRowVariant(indexing_.row_length, launch.layout.vec, launch.rows, device,
                                     forced_);
  }

  const codegen::RowIndexing indexing_;
  const std::optional<codegen::RowStrategy> forced_;
  const std::optional<codegen::RowVariant> variant_;
  bool empty_ = false;  // no rows, or rows of no elements
  struct Ready {
    codegen::RowLayout layout;
    codegen::RowVariant variant;
    int ordinal;
    std::shared_ptr<const codegen::LoadedKernel> kernel;
    std::string name;
  };
  std::deque<Ready> ready_;  // a deque: last_kernel_ points into it
};

}  // namespace

absl::StatusOr<std::unique_ptr<GroupRunner>> GroupRunner::Create(const graph::Node& group,
                                                                 const Options& options) {
  if (codegen::IsRowGroupBody(*group.body())) {
    std::string strategy = options.row_strategy;
    if (strategy.empty()) {
      const char* env = std::getenv("TORCHFUSE_ROW_STRATEGY");
      if (env != nullptr) strategy = env;
    }
    std::optional<codegen::RowStrategy> forced;
    std::optional<codegen::RowVariant> variant;
    if (strategy.find('_') != std::string::npos) {
      TF_ASSIGN_OR_RETURN(codegen::RowVariant v, codegen::ParseRowVariant(strategy));
      variant = v;
      forced = v.strategy;
    } else if (!strategy.empty()) {
      TF_ASSIGN_OR_RETURN(codegen::RowStrategy s, codegen::ParseRowStrategy(strategy));
      forced = s;
    }
    TF_ASSIGN_OR_RETURN(codegen::RowIndexing indexing, codegen::AnalyzeRowIndexing(*group.body()));
    return std::unique_ptr<GroupRunner>(
        new RowRunner(group, std::move(indexing), forced, variant));
  }
  TF_ASSIGN_OR_RETURN(codegen::GroupIndexing indexing, codegen::AnalyzeIndexing(*group.body()));
  return std::unique_ptr<GroupRunner>(
      new ElementwiseRunner(group, std::move(indexing), options.block_size, options.unroll));
}

}  // namespace torchfuse::runtime
