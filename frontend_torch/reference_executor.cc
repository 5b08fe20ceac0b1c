#include "frontend_torch/reference_executor.h"

#include <algorithm>
#include <typeinfo>
#include <unordered_map>

#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "frontend_torch/torchscript_importer.h"
#include "graph/shape.h"

namespace torchfuse::frontend {

using graph::Node;
using graph::OpKind;

namespace {

// Whether `t` is a wrapped number: a Python number of the graph, as eager's ops take it.
bool Wrapped(const at::Tensor& t) { return t.unsafeGetTensorImpl()->is_wrapped_number(); }

// The value of a wrapped number (a 0-dim CPU tensor standing for a Python number), read in
// place. item() dispatches _local_scalar_dense, and a Python dispatch mode active in the caller
// receives the tensor as the Python number it stands for and fails to re-dispatch it.
at::Scalar WrappedValue(const at::Tensor& t) {
  if (!t.device().is_cpu()) return t.item();
  const void* p = t.data_ptr();
  switch (t.scalar_type()) {
    case at::kDouble: return at::Scalar(*static_cast<const double*>(p));
    case at::kLong: return at::Scalar(*static_cast<const int64_t*>(p));
    case at::kBool: return at::Scalar(*static_cast<const bool*>(p));
    default: return t.item();
  }
}

// A comparison, with a wrapped number passed as the Scalar it stands for (eq.Scalar, ...), as
// eager takes `x != -100`: a Python dispatch mode active in the caller receives a wrapped
// number as a Python number, which the .Tensor overloads of the comparisons refuse. A number
// on the left swaps the sides (`1 < x` is `x > 1`).
at::Tensor Compare(OpKind kind, const at::Tensor& a, const at::Tensor& b) {
  if (Wrapped(a) && !Wrapped(b)) {
    const OpKind mirrored = kind == OpKind::kLt   ? OpKind::kGt
                            : kind == OpKind::kLe ? OpKind::kGe
                            : kind == OpKind::kGt ? OpKind::kLt
                            : kind == OpKind::kGe ? OpKind::kLe
                                                  : kind;
    return Compare(mirrored, b, a);
  }
  if (Wrapped(b) && !Wrapped(a)) {
    const at::Scalar s = WrappedValue(b);
    switch (kind) {
      case OpKind::kEq: return at::eq(a, s);
      case OpKind::kNe: return at::ne(a, s);
      case OpKind::kLt: return at::lt(a, s);
      case OpKind::kLe: return at::le(a, s);
      case OpKind::kGt: return at::gt(a, s);
      default: return at::ge(a, s);
    }
  }
  switch (kind) {
    case OpKind::kEq: return at::eq(a, b);
    case OpKind::kNe: return at::ne(a, b);
    case OpKind::kLt: return at::lt(a, b);
    case OpKind::kLe: return at::le(a, b);
    case OpKind::kGt: return at::gt(a, b);
    default: return at::ge(a, b);
  }
}

at::Tensor ScalarConstant(const Node& n, at::Device device) {
  const graph::DType d = n.output()->type().dtype;
  at::Tensor t = at::scalar_tensor(n.NumberAttr("value"),
                                   at::TensorOptions().dtype(ToScalarType(d)));
  const bool wrapped = n.HasAttr("wrapped") && n.IntAttr("wrapped");
  if (!wrapped) t = t.to(device);
  // Wrapped scalars stay on the CPU, as ATen's do, and keep their lower promotion priority.
  if (wrapped) t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// cuBLAS takes its fast kernels only where every matrix's leading dimension is a multiple of
// 16 bytes; a GPT-2 LM head's 50257 columns are not, and its product then runs at a quarter of
// the speed. A large product on CUDA with such a dim is computed on zero-padded copies (the
// padding adds zeros to the sums) and the result sliced back, as Inductor's pad_mm does: the
// copies cost far less than the slow product.
int64_t Alignment(const at::Tensor& t) {
  if (!t.is_cuda()) return 0;
  switch (t.scalar_type()) {
    case at::kHalf:
    case at::kBFloat16: return 8;
    case at::kFloat: return 4;
    default: return 0;
  }
}

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// A row-major matrix `t` zero-padded at its end to `rows` x `cols`: only the padding is
// zeroed. Copies already made (`copies`) of the same memory at the same version are reused.
at::Tensor PadRowMajor(const at::Tensor& t, int64_t rows, int64_t cols,
                       std::vector<ReferenceExecutor::PaddedCopy>* copies) {
  const int64_t version =
      static_cast<int64_t>(t.unsafeGetTensorImpl()->version_counter().current_version());
  const std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  for (auto& c : *copies) {
    if (c.data == t.data_ptr() && c.sizes == sizes && c.strides == strides &&
        c.version == version && c.rows == rows && c.cols == cols) {
      c.used = true;
      return c.padded;
    }
  }
  at::Tensor out = at::empty({rows, cols}, t.options());
  out.narrow(0, 0, t.size(0)).narrow(1, 0, t.size(1)).copy_(t);
  if (cols > t.size(1)) out.narrow(1, t.size(1), cols - t.size(1)).zero_();
  if (rows > t.size(0)) out.narrow(0, t.size(0), rows - t.size(0)).zero_();
  copies->push_back({t, t.data_ptr(), sizes, strides, version, rows, cols, out});
  return out;
}

// `t` ([rows, cols] or [cols]) zero-padded at the end of its last two dims to `rows` x `cols`,
// in its own layout: a transposed matrix stays transposed (its copy is not a transposition),
// so that the leading dimension cuBLAS sees is the padded one.
at::Tensor PadTo(const at::Tensor& t, int64_t rows, int64_t cols,
                 std::vector<ReferenceExecutor::PaddedCopy>* copies) {
  if (t.dim() < 2) {
    return cols == t.size(-1) ? t : at::constant_pad_nd(t, {0, cols - t.size(-1)}, 0);
  }
  if (rows == t.size(-2) && cols == t.size(-1)) return t;
  if (t.dim() != 2) return at::constant_pad_nd(t, {0, cols - t.size(-1), 0, rows - t.size(-2)}, 0);
  if (t.stride(0) == 1 && t.size(0) > 1) return PadRowMajor(t.t(), cols, rows, copies).t();
  return PadRowMajor(t, rows, cols, copies);
}

// a [M, K] @ b [K, N] (+ bias, as addmm) on padded copies where that pays; nullopt where it
// does not (the caller runs the plain op). A dim is padded where it is the leading dimension
// of an operand (K or M of a row- or column-major a, N or K of b) or of the result (N).
c10::optional<at::Tensor> PaddedProduct(const at::Tensor& a, const at::Tensor& b,
                                        const c10::optional<at::Tensor>& bias, double beta,
                                        double alpha,
                                        std::vector<ReferenceExecutor::PaddedCopy>* copies) {
  const int64_t align = Alignment(a);
  if (align == 0 || a.dim() != 2 || b.dim() != 2 || a.scalar_type() != b.scalar_type()) {
    return c10::nullopt;
  }
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m * n * k < (int64_t{1} << 30)) return c10::nullopt;
  auto column_major = [](const at::Tensor& t) { return t.stride(0) == 1 && t.size(0) > 1; };
  auto misaligned = [&](int64_t d) { return d % align != 0; };
  const bool pad_m = column_major(a) && misaligned(m);
  const bool pad_k = misaligned(k) && (!column_major(a) || column_major(b));
  const bool pad_n = misaligned(n);
  if (!pad_m && !pad_k && !pad_n) return c10::nullopt;
  const int64_t mp = pad_m ? RoundUp(m, align) : m;
  const int64_t kp = pad_k ? RoundUp(k, align) : k;
  const int64_t np = pad_n ? RoundUp(n, align) : n;
  const at::Tensor ap = PadTo(a, mp, kp, copies), bp = PadTo(b, kp, np, copies);
  at::Tensor out;
  if (bias) {
    at::Tensor c = *bias;
    if (c.dim() >= 1 && c.size(-1) == n && np != n) {
      c = PadTo(c, c.dim() >= 2 ? c.size(-2) : 1, np, copies);
    }
    if (c.dim() >= 2 && c.size(-2) == m && mp != m) c = PadTo(c, mp, c.size(-1), copies);
    out = at::addmm(c, ap, bp, beta, alpha);
  } else {
    out = at::mm(ap, bp);
  }
  return out.narrow(0, 0, m).narrow(1, 0, n);
}

// A product's epilogue (fusion::FuseMatmulEpilogues): "" where it has none.
std::string EpilogueOf(const Node& n) {
  return n.HasAttr("epilogue") ? n.StringAttr("epilogue") : std::string();
}

// A product's epilogue applied to the product, where the product ran without it.
at::Tensor ApplyEpilogue(const std::string& epilogue, const at::Tensor& product) {
  if (epilogue == graph::kGeluTanhEpilogue) return at::gelu(product, "tanh");
  if (epilogue == graph::kReluEpilogue) return at::relu(product);
  return product;
}

// addmm(bias, a, b) followed by its epilogue. On CUDA, ATen's `_addmm_activation` applies GELU's
// tanh form or ReLU in cuBLASLt's epilogue, where it can, and apart elsewhere: GELU's tanh form
// since torch 2.1 (before, its paths without cuBLASLt took the exact GELU). On the CPU it takes
// the exact GELU, so there the product and its epilogue run apart, as they do for an empty
// operand.
at::Tensor ProductWithEpilogue(const std::string& epilogue, const at::Tensor& bias,
                               const at::Tensor& a, const at::Tensor& b, double beta,
                               double alpha) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (a.is_cuda() && a.numel() > 0 && b.numel() > 0) {
    return at::_addmm_activation(bias, a, b, beta, alpha,
                                 /*use_gelu=*/epilogue == graph::kGeluTanhEpilogue);
  }
#endif
  return ApplyEpilogue(epilogue, at::addmm(bias, a, b, beta, alpha));
}

std::vector<int64_t> Dims(const Node& n, int64_t rank) {
  auto dims = graph::ReductionDims(n.attrs(), rank);
  return dims.ok() ? *dims : std::vector<int64_t>{};
}

// A map key for a device: its type and index.
int64_t DeviceKey(at::Device device) {
  return static_cast<int64_t>(device.type()) * 65536 + device.index();
}

}  // namespace

std::vector<at::Tensor> AttentionOperands(const std::string& target,
                                          const std::vector<at::Tensor>& in) {
  std::vector<at::Tensor> out = in;
  for (size_t i = 0; i < out.size(); ++i) {
    at::Tensor& t = out[i];
    if (!t.defined() || t.dim() < 1) continue;
    bool rows = t.size(-1) <= 1 || t.stride(-1) == 1;
    // Query, key and value: their rows start 16 bytes apart and at a 16-byte address, as the
    // fused kernels read them (a view of another layout, its copy dropped in the graph:
    // fusion::DropCopiesIntoAttention).
    if (i < 3 && rows) {
      const int64_t per16 = std::max<int64_t>(1, 16 / static_cast<int64_t>(t.element_size()));
      rows = !t.has_storage() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
      for (int64_t d = 0; d + 1 < t.dim(); ++d) {
        rows = rows && (t.size(d) <= 1 || t.stride(d) % per16 == 0);
      }
    }
    if (!rows) t = t.contiguous();
  }
  constexpr int64_t kAlign = 8;
  if (target != "aten::_scaled_dot_product_efficient_attention" || out.size() < 4 ||
      !out[3].defined() || out[3].dim() < 2) {
    return out;
  }
  at::Tensor& mask = out[3];
  bool aligned = true;
  for (int64_t d = 0; d + 1 < mask.dim(); ++d) aligned &= mask.stride(d) % kAlign == 0;
  if (aligned) return out;
  at::Tensor compact = mask;
  for (int64_t d = 0; d + 1 < mask.dim(); ++d) {
    if (mask.stride(d) == 0 && mask.size(d) > 1) compact = compact.narrow(d, 0, 1);
  }
  const int64_t keys = mask.size(-1);
  const int64_t pad = (kAlign - keys % kAlign) % kAlign;
  mask = at::constant_pad_nd(compact, {0, pad == 0 ? kAlign : pad})
             .narrow(-1, 0, keys)
             .expand(mask.sizes());
  return out;
}

c10::optional<at::Tensor> ReferenceExecutor::Padded(const at::Tensor& a, const at::Tensor& b,
                                                     const c10::optional<at::Tensor>& bias,
                                                     double beta, double alpha) {
  padded_touched_ = true;
  const size_t before = padded_.size();
  c10::optional<at::Tensor> out = PaddedProduct(a, b, bias, beta, alpha, &padded_);
  padded_made_ += static_cast<int64_t>(padded_.size() - before);
  return out;
}

void ReferenceExecutor::EndRun() {
  if (!padded_touched_) return;
  padded_.erase(std::remove_if(padded_.begin(), padded_.end(),
                               [](const PaddedCopy& c) { return !c.used; }),
                padded_.end());
  for (PaddedCopy& c : padded_) c.used = false;
  padded_touched_ = false;
}

at::Tensor ReferenceExecutor::Constant(const Node& node, at::Device device) {
  const auto key = std::make_pair(&node, DeviceKey(device));
  auto it = constants_.find(key);
  if (it != constants_.end()) return it->second;
  at::Tensor t = ScalarConstant(node, device);
  constants_.emplace(key, t);
  constant_data_.insert(t.storage().data());
  return t;
}

absl::StatusOr<at::Tensor> ReferenceExecutor::Param(const Node& node, at::Device device) {
  auto key = std::make_pair(&node, DeviceKey(device));
  auto it = params_.find(key);
  if (it != params_.end()) return it->second;
  if (!node.data()) {
    return absl::FailedPreconditionError(
        absl::StrCat("param '", node.StringAttr("name"), "' has no captured data"));
  }
  at::Tensor t = TensorFromData(*node.data(), device);
  params_[key] = t;
  return t;
}

absl::StatusOr<std::vector<at::Tensor>> ReferenceExecutor::RunNode(
    const Node& n, const std::vector<at::Tensor>& in, at::Device device) {
  auto one = [](at::Tensor t) { return std::vector<at::Tensor>{std::move(t)}; };
  const int64_t rank = n.inputs().empty() ? 0 : n.input(0)->type().rank();
  try {
    switch (n.kind()) {
      case OpKind::kConstant: return one(Constant(n, device));
      case OpKind::kParam: {
        TF_ASSIGN_OR_RETURN(at::Tensor t, Param(n, device));
        return one(t);
      }
      case OpKind::kNeg: return one(at::neg(in[0]));
      case OpKind::kExp: return one(at::exp(in[0]));
      case OpKind::kLog: return one(at::log(in[0]));
      case OpKind::kLog1p: return one(at::log1p(in[0]));
      case OpKind::kTanh: return one(at::tanh(in[0]));
      case OpKind::kSigmoid: return one(at::sigmoid(in[0]));
      case OpKind::kRelu: return one(at::relu(in[0]));
      case OpKind::kGelu: return one(at::gelu(in[0]));
      case OpKind::kGeluTanh: return one(at::gelu(in[0], "tanh"));
      case OpKind::kSilu: return one(at::silu(in[0]));
      case OpKind::kSqrt: return one(at::sqrt(in[0]));
      case OpKind::kRsqrt: return one(at::rsqrt(in[0]));
      case OpKind::kReciprocal: return one(at::reciprocal(in[0]));
      case OpKind::kAbs: return one(at::abs(in[0]));
      case OpKind::kErf: return one(at::erf(in[0]));
      case OpKind::kSin: return one(at::sin(in[0]));
      case OpKind::kCos: return one(at::cos(in[0]));
      case OpKind::kNot: return one(at::logical_not(in[0]));
      case OpKind::kCast: return one(in[0].to(ToScalarType(n.output()->type().dtype)));
      case OpKind::kClamp: {
        auto bound = [&n](const char* name) -> c10::optional<at::Scalar> {
          auto it = n.attrs().find(name);
          if (it == n.attrs().end()) return c10::nullopt;
          if (auto* i = std::get_if<int64_t>(&it->second)) return at::Scalar(*i);
          return at::Scalar(std::get<double>(it->second));
        };
        return one(at::clamp(in[0], bound("min"), bound("max")).to(
            ToScalarType(n.output()->type().dtype)));
      }
      case OpKind::kAdd: return one(at::add(in[0], in[1]));
      case OpKind::kSub: return one(at::sub(in[0], in[1]));
      case OpKind::kMul: return one(at::mul(in[0], in[1]));
      case OpKind::kDiv: return one(at::div(in[0], in[1]));
      case OpKind::kPow:
        // A wrapped number is a Scalar, as eager's pow.Tensor_Scalar and pow.Scalar take it
        // (CUDA's pow of a tensor and a CPU tensor fails where the number is an integer).
        if (Wrapped(in[1])) {
          return one(at::pow(in[0], WrappedValue(in[1])));
        }
        if (Wrapped(in[0])) {
          return one(at::pow(WrappedValue(in[0]), in[1]));
        }
        return one(at::pow(in[0], in[1]));
      case OpKind::kMaximum:
      case OpKind::kMinimum: {
        // No Scalar overload: a wrapped number becomes a tensor of the result's dtype on the
        // device (the max or min of two values converted to the type they promote to is the
        // same value).
        at::Tensor a = in[0], b = in[1];
        if (Wrapped(a) || Wrapped(b)) {
          const at::ScalarType d = ToScalarType(n.output()->type().dtype);
          auto operand = [&](const at::Tensor& t) {
            return Wrapped(t) ? at::scalar_tensor(WrappedValue(t),
                                                  at::TensorOptions().dtype(d).device(device))
                              : t.to(d);
          };
          a = operand(a);
          b = operand(b);
        }
        return one(n.kind() == OpKind::kMaximum ? at::maximum(a, b) : at::minimum(a, b));
      }
      case OpKind::kEq:
      case OpKind::kNe:
      case OpKind::kLt:
      case OpKind::kLe:
      case OpKind::kGt:
      case OpKind::kGe: return one(Compare(n.kind(), in[0], in[1]));
      case OpKind::kWhere: {
        // Operands on one device (a wrapped CPU scalar may not mix with CUDA tensors here).
        const graph::DType d = n.output()->type().dtype;
        at::Tensor a = in[1].to(device, ToScalarType(d));
        at::Tensor b = in[2].to(device, ToScalarType(d));
        return one(at::where(in[0].to(device), a, b));
      }
      case OpKind::kSum: return one(at::sum(in[0], Dims(n, rank), n.IntAttr("keepdim") != 0));
      case OpKind::kMean: return one(at::mean(in[0], Dims(n, rank), n.IntAttr("keepdim") != 0));
      case OpKind::kAmax: return one(at::amax(in[0], Dims(n, rank), n.IntAttr("keepdim") != 0));
      case OpKind::kAmin: return one(at::amin(in[0], Dims(n, rank), n.IntAttr("keepdim") != 0));
      case OpKind::kVar: {
        const std::vector<int64_t> dims = Dims(n, rank);
        const bool keep = n.IntAttr("keepdim") != 0;
        const int64_t c = n.HasAttr("correction") ? n.IntAttr("correction") : 1;
        if (c == 0 || c == 1) return one(at::var(in[0], dims, c == 1, keep));
        int64_t count = 1;
        for (int64_t d : dims) count *= in[0].size(d);
        return one(at::var(in[0], dims, false, keep) * (double(count) / double(count - c)));
      }
      case OpKind::kSoftmax: return one(at::softmax(in[0], n.IntAttr("dim")));
      case OpKind::kLogSoftmax: return one(at::log_softmax(in[0], n.IntAttr("dim")));
      case OpKind::kLayerNorm: {
        const int64_t nd = n.IntAttr("normalized_ndim");
        std::vector<int64_t> shape(in[0].sizes().end() - nd, in[0].sizes().end());
        c10::optional<at::Tensor> w, b;
        if (in.size() > 1) w = in[1];
        if (in.size() > 2) b = in[2];
        return one(at::layer_norm(in[0], shape, w, b, n.FloatAttr("eps")));
      }
      case OpKind::kMatmul: {
        if (auto p = Padded(in[0], in[1], c10::nullopt, 1.0, 1.0)) return one(*p);
        return one(at::matmul(in[0], in[1]));
      }
      case OpKind::kLinear: {
        c10::optional<at::Tensor> b;
        if (in.size() > 2) b = in[2];
        const std::string epilogue = EpilogueOf(n);
        if (in[0].dim() >= 1) {
          const at::Tensor x = in[0].reshape({-1, in[0].size(-1)});
          std::vector<int64_t> sizes(in[0].sizes().begin(), in[0].sizes().end() - 1);
          sizes.push_back(in[1].size(0));
          if (auto p = Padded(x, in[1].t(), b, 1.0, 1.0)) {
            return one(ApplyEpilogue(epilogue, *p).reshape(sizes));
          }
          if (!epilogue.empty() && b) {
            return one(ProductWithEpilogue(epilogue, *b, x, in[1].t(), 1.0, 1.0).reshape(sizes));
          }
        }
        return one(ApplyEpilogue(epilogue, at::linear(in[0], in[1], b)));
      }
      case OpKind::kAddmm: {
        const double beta = n.NumberAttr("beta"), alpha = n.NumberAttr("alpha");
        const std::string epilogue = EpilogueOf(n);
        if (auto p = Padded(in[1], in[2], in[0], beta, alpha)) {
          return one(ApplyEpilogue(epilogue, *p));
        }
        if (!epilogue.empty()) {
          return one(ProductWithEpilogue(epilogue, in[0], in[1], in[2], beta, alpha));
        }
        return one(at::addmm(in[0], in[1], in[2], beta, alpha));
      }
      case OpKind::kReshape: return one(in[0].reshape(SizesOf(n.output())));
      case OpKind::kUnsqueeze: return one(in[0].unsqueeze(n.IntAttr("dim")));
      case OpKind::kSqueeze: return one(in[0].reshape(SizesOf(n.output())));
      case OpKind::kExpand: return one(in[0].expand(SizesOf(n.output())));
      case OpKind::kTranspose: return one(in[0].transpose(n.IntAttr("dim0"), n.IntAttr("dim1")));
      case OpKind::kPermute: return one(in[0].permute(n.IntsAttr("dims")));
      case OpKind::kContiguous: return one(in[0].contiguous());
      case OpKind::kCat: return one(at::cat(in, n.IntAttr("dim")));
      case OpKind::kSlice: {
        const int64_t dim = n.IntAttr("dim");
        int64_t end = n.IntAttr("end");
        if (graph::IsSymbolic(end)) {
          // x[:T] of a static dim: torch would stop at the dim's end, where the graph's types
          // say T; a call past it is an error, not a shorter tensor.
          if (binding_ != nullptr) end = binding_->Apply(end);
          const int64_t size = in[0].size(dim);
          if (graph::IsSymbolic(end) || end > size) {
            return absl::OutOfRangeError(absl::StrCat(
                "slice ", n.source(), " to ", graph::DimName(n.IntAttr("end")),
                graph::IsSymbolic(end) ? " has no value" : absl::StrCat("=", end),
                ": past the ", size, " of its dim ", dim));
          }
        }
        return one(in[0].slice(dim, n.IntAttr("start"), end, n.IntAttr("step")));
      }
      case OpKind::kOpaque: {
        const int64_t h = n.IntAttr("handle");
        if (opaque_ == nullptr || h < 0 || h >= static_cast<int64_t>(opaque_->size())) {
          return absl::FailedPreconditionError(
              absl::StrCat("no runner for opaque node ", n.StringAttr("target")));
        }
        // ATen's fused attention kernels (flash, memory-efficient, cuDNN) take only operands
        // whose last dim has stride 1 and run the math form otherwise. The trace saw the
        // operands' layouts; at run time they are what torchfuse's kernels and views made (a
        // position bias gathered and permuted keeps its heads innermost).
        absl::StatusOr<std::vector<at::Tensor>> ran =
            graph::IsAttentionOp(n)
                ? (*opaque_)[h]->run(AttentionOperands(n.StringAttr("target"), in), binding_)
                : (*opaque_)[h]->run(in, binding_);
        TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> outs, std::move(ran));
        // A factory of dynamic size (arange(0, T)) runs at run time; as the factories run at
        // import, it makes its tensor where the graph's inputs are.
        if (n.inputs().empty()) {
          for (at::Tensor& t : outs) t = t.to(device);
        }
        return outs;
      }
      case OpKind::kFusionGroup: {
        ++depth_;
        auto out = Run(*n.body(), in);
        --depth_;
        return out;
      }
    }
  } catch (const std::exception& e) {
    const std::string interpreter = OpFailed();
    return absl::InternalError(absl::StrCat("reference: ", graph::OpName(n.kind()), " failed: ",
                                            ExceptionText(e, interpreter)));
  }
  return absl::InternalError("reference: unknown op");
}

absl::StatusOr<std::vector<at::Tensor>> ReferenceExecutor::Run(
    const graph::Graph& graph, const std::vector<at::Tensor>& inputs) {
  if (static_cast<int>(inputs.size()) != graph.num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("reference: graph takes ", graph.num_inputs(),
                                                   " inputs, got ", inputs.size()));
  }
  const at::Device device = inputs.empty() ? at::Device(at::kCPU) : inputs[0].device();
  const bool nested = depth_ > 0;
  std::unordered_map<const graph::Value*, at::Tensor> env;
  for (int i = 0; i < graph.num_inputs(); ++i) env[graph.input(i)] = inputs[i];
  // A value is dropped after its last use, as eager drops it: a group's torch ops hold no
  // more memory than eager's.
  auto known = dead_after_.find(&graph);
  if (known == dead_after_.end()) {
    known = dead_after_.emplace(&graph, graph::DeadAfter(graph)).first;
  }
  const std::vector<std::vector<const graph::Value*>>& dead = known->second;
  for (size_t k = 0; k < graph.nodes().size(); ++k) {
    const graph::Node& n = *graph.nodes()[k];
    std::vector<at::Tensor> operands;
    for (const graph::Value* v : n.inputs()) operands.push_back(env.at(v));
    TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> outs, RunNode(n, operands, device));
    operands.clear();
    for (int i = 0; i < n.num_outputs(); ++i) env[n.output(i)] = outs.at(i);
    for (const graph::Value* v : dead[k]) env.erase(v);
  }
  std::vector<at::Tensor> result;
  for (const graph::Value* v : graph.outputs()) {
    // A cached constant (or a view of one) is not handed out: its reader may write into it.
    const at::Tensor& t = env.at(v);
    result.push_back(SharesConstant(t) ? t.clone() : t);
  }
  if (!nested) EndRun();
  return result;
}

absl::StatusOr<std::vector<at::Tensor>> RunReference(const ImportedModel& model,
                                                     const std::vector<at::Tensor>& inputs) {
  ReferenceExecutor exec(&model.opaque);
  return exec.Run(*model.graph, inputs);
}

}  // namespace torchfuse::frontend
