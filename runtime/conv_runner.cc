#include "runtime/conv_runner.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "codegen_nvrtc/kernel_cache.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "graph/dtype.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

namespace {

// The conv2d attribute's fields.
struct Geometry {
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

std::optional<Geometry> GeometryFrom(const std::vector<int64_t>& g) {
  if (g.size() != 7) return std::nullopt;
  return Geometry{g[0], g[1], g[2], g[3], g[4], g[5], g[6]};
}

std::optional<Geometry> GeometryOf(const graph::Node& n) {
  if (n.kind() != graph::OpKind::kOpaque || !n.HasAttr("conv2d") || !n.HasAttr("conv_bias")) {
    return std::nullopt;
  }
  return GeometryFrom(n.IntsAttr("conv2d"));
}

bool KernelDType(graph::DType t) {
  return t == graph::DType::kF32 || t == graph::DType::kF16 || t == graph::DType::kBF16;
}

// Filters up to 11 x 11, strides and dilations up to 8: the kernel unrolls over them.
bool KernelGeometry(const Geometry& g, int64_t kh, int64_t kw) {
  return g.sh >= 1 && g.sw >= 1 && g.sh <= 8 && g.sw <= 8 && g.dh >= 1 && g.dw >= 1 &&
         g.dh <= 8 && g.dw <= 8 && g.ph >= 0 && g.pw >= 0 && kh >= 1 && kw >= 1 && kh <= 11 &&
         kw <= 11;
}

// The kernel for a convolution of `geometry` over `c` channels of `dtype` with a kh x kw
// filter, its pointers aligned to `align` bytes.
codegen::DepthwiseConvSpec SpecFor(const Geometry& geometry, graph::DType dtype, int64_t kh,
                                   int64_t kw, bool bias, bool nchw, int64_t c, int align) {
  codegen::DepthwiseConvSpec spec;
  spec.dtype = dtype;
  spec.kh = static_cast<int>(kh);
  spec.kw = static_cast<int>(kw);
  spec.sh = static_cast<int>(geometry.sh);
  spec.sw = static_cast<int>(geometry.sw);
  spec.dh = static_cast<int>(geometry.dh);
  spec.dw = static_cast<int>(geometry.dw);
  spec.bias = bias;
  spec.nchw = nchw;
  return codegen::DepthwiseConvTile(spec, c, align);
}

}  // namespace

bool ConvRunner::Takes(const graph::Node& n) {
  const std::optional<Geometry> g = GeometryOf(n);  // conv2d and conv_bias are there
  if (!g) return false;
  const size_t operands = n.IntAttr("conv_bias") == 1 ? 3 : 2;
  if (n.inputs().size() != operands || n.num_outputs() != 1) return false;
  const graph::TensorType& x = n.input(0)->type();
  const graph::TensorType& w = n.input(1)->type();
  if (x.rank() != 4 || w.rank() != 4 || w.dtype != x.dtype) return false;
  if (operands == 3) {
    const graph::TensorType& b = n.input(2)->type();
    if (b.rank() != 1 || b.dtype != x.dtype) return false;
  }
  for (int64_t d : w.sizes) {
    if (graph::IsSymbolic(d)) return false;
  }
  // Channels and the filter known; the batch and spatial sizes may be symbols.
  return !graph::IsSymbolic(x.sizes[1]) &&
         TakesSizes(x.dtype, x.sizes[1], w.sizes, n.IntsAttr("conv2d"));
}

bool ConvRunner::TakesSizes(graph::DType dtype, int64_t channels,
                            const std::vector<int64_t>& weight,
                            const std::vector<int64_t>& conv2d) {
  const std::optional<Geometry> g = GeometryFrom(conv2d);
  return g && KernelDType(dtype) && weight.size() == 4 && channels == g->groups &&
         weight[0] == g->groups && weight[1] == 1 && KernelGeometry(*g, weight[2], weight[3]);
}

bool ConvRunner::ExpectsNchw(const graph::Node& n) {
  return !n.inputs().empty() && n.input(0)->type().dtype == graph::DType::kF32;
}

std::optional<codegen::DepthwiseConvSpec> ConvRunner::SpecOf(const graph::Node& n, bool nchw) {
  if (!Takes(n)) return std::nullopt;
  const graph::TensorType& w = n.input(1)->type();
  // torch's allocations are aligned to at least 256 bytes.
  return SpecFor(*GeometryOf(n), w.dtype, w.sizes[2], w.sizes[3], n.IntAttr("conv_bias") == 1,
                 nchw, w.sizes[0], /*align=*/256);
}

absl::StatusOr<std::optional<at::Tensor>> ConvRunner::Run(const graph::Node& n,
                                                          const std::vector<at::Tensor>& operands) {
  const std::optional<Geometry> g = GeometryOf(n);
  if (!g) return std::optional<at::Tensor>();
  const bool bias = n.IntAttr("conv_bias") == 1;
  if (operands.size() != (bias ? 3u : 2u)) return std::optional<at::Tensor>();
  const at::Tensor& x = operands[0];
  at::Tensor w = operands[1];
  at::Tensor b = bias ? operands[2] : at::Tensor();
  const auto plain = [&](const at::Tensor& t) {
    return t.is_cuda() && t.device() == x.device() && t.layout() == at::kStrided &&
           t.scalar_type() == x.scalar_type() && !t.is_conj() && !t.is_neg();
  };
  const auto grad = [](const at::Tensor& t) {
    return t.defined() && at::GradMode::is_enabled() && t.requires_grad();
  };
  // Why torch runs this call of the node instead; null where the kernel takes it.
  const char* why = nullptr;
  int64_t N = 0, C = 0, H = 0, W = 0, kh = 0, kw = 0, OH = 0, OW = 0;
  const absl::StatusOr<graph::DType> dtype = frontend::FromScalarType(x.scalar_type());
  if (!plain(x) || !plain(w) || (bias && !plain(b)) || !dtype.ok() || !KernelDType(*dtype) ||
      x.dim() != 4 || w.dim() != 4 || (bias && b.dim() != 1)) {
    why = "the operands are not CUDA tensors of one dtype (f32, f16 or bf16) and 4 dims";
  } else if (grad(x) || grad(w) || grad(b)) {
    why = "an operand requires grad";
  } else if (!x.is_contiguous(at::MemoryFormat::ChannelsLast) && !x.is_contiguous()) {
    why = "the input is neither channels-last nor contiguous";
  } else {
    N = x.size(0);
    C = x.size(1);
    H = x.size(2);
    W = x.size(3);
    kh = w.size(2);
    kw = w.size(3);
    const bool fits = KernelGeometry(*g, kh, kw) && H + 2 * g->ph >= g->dh * (kh - 1) + 1 &&
                      W + 2 * g->pw >= g->dw * (kw - 1) + 1;
    if (fits) {
      OH = (H + 2 * g->ph - g->dh * (kh - 1) - 1) / g->sh + 1;
      OW = (W + 2 * g->pw - g->dw * (kw - 1) - 1) / g->sw + 1;
    }
    if (!fits || C != g->groups || w.size(0) != C || w.size(1) != 1 ||
        (bias && b.size(0) != C) || x.numel() == 0 || x.numel() > (int64_t{1} << 31) - 1 ||
        N * OH * OW * C > (int64_t{1} << 31) - 1) {
      why = "the sizes are not ones the kernel takes (a channel multiplier, no elements, 2^31 "
            "elements or more, a filter wider than its padded input)";
    }
  }
  if (why != nullptr) {
    // Once per reason: a network's depthwise convolutions share it (a training step's
    // operands require grad), and each would otherwise warn on its own.
    if (declined_.insert(why).second) {
      TORCH_WARN("torchfuse: depthwise convolutions run in torch where ", why, " (the first: ",
                 n.source().empty() ? n.StringAttr("target") : n.source(), ")");
    }
    return std::optional<at::Tensor>();
  }
  if (!w.is_contiguous()) w = w.contiguous();
  if (bias && !b.is_contiguous()) b = b.contiguous();
  // The output in the input's layout, as cuDNN gives it (channels-last where both hold).
  const bool nchw = !x.is_contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor out = at::empty(
      {N, C, OH, OW}, x.options().memory_format(nchw ? at::MemoryFormat::Contiguous
                                                     : at::MemoryFormat::ChannelsLast));
  // The channel vectors' loads need the input's and output's addresses aligned to them.
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(x.data_ptr()) |
                              reinterpret_cast<uintptr_t>(out.data_ptr());
  const int align = addresses % 8 == 0 ? 8 : addresses % 4 == 0 ? 4 : 2;
  const codegen::DepthwiseConvSpec spec = SpecFor(*g, *dtype, kh, kw, bias, nchw, C, align);
  const int ordinal = OrdinalOf(x.device());
  auto& kernel = kernels_[std::make_pair(ordinal, spec.Fields())];
  if (kernel == nullptr) {
    TF_ASSIGN_OR_RETURN(codegen::KernelSource source, codegen::EmitDepthwiseConvKernel(spec));
    TF_ASSIGN_OR_RETURN(kernel, codegen::GetOrLoad(source, ordinal, env_.disk.get()));
  }
  const void* x_ptr = x.data_ptr();
  const void* w_ptr = w.data_ptr();
  const void* b_ptr = bias ? b.data_ptr() : w.data_ptr();  // not read without a bias
  void* out_ptr = out.data_ptr();
  int n32 = static_cast<int>(N), h32 = static_cast<int>(H), w32 = static_cast<int>(W),
      c32 = static_cast<int>(C), oh32 = static_cast<int>(OH), ow32 = static_cast<int>(OW),
      ph32 = static_cast<int>(g->ph), pw32 = static_cast<int>(g->pw);
  // Fewer than 2^31 blocks: about N * OH * OW * C / (th * tw * kDepthwiseConvBlock) of them,
  // and the output has fewer than 2^31 elements (checked above).
  codegen::DepthwiseConvLaunch launch = codegen::ComputeDepthwiseConvLaunch(spec, N, OH, OW, C);
  void* args[] = {&x_ptr, &w_ptr, &b_ptr, &out_ptr, &n32, &h32, &w32, &c32, &oh32,
                  &ow32, &ph32, &pw32, &launch.row_tiles, &launch.col_tiles, &launch.chunks};
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(ordinal));
  TF_RETURN_IF_ERROR(kernel->Launch(static_cast<unsigned>(launch.blocks),
                                    codegen::kDepthwiseConvBlock,
                                    args, CurrentStream(x.device())));
  return std::optional<at::Tensor>(out);
}

void ConvRunner::Warm(const graph::Node& n, const at::Device& device) const {
  if (!device.is_cuda()) return;
  absl::StatusOr<codegen::DeviceInfo> info = codegen::GetDeviceInfo(OrdinalOf(device));
  if (!info.ok()) return;
  const std::optional<codegen::DepthwiseConvSpec> spec = SpecOf(n, ExpectsNchw(n));
  if (!spec) return;
  absl::StatusOr<codegen::KernelSource> kernel = codegen::EmitDepthwiseConvKernel(*spec);
  if (kernel.ok()) codegen::CompileAhead(std::move(*kernel), info->arch, env_.disk);
}

}  // namespace torchfuse::runtime
