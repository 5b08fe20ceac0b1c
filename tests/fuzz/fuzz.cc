// A differential fuzzer: random TorchScript programs (sometimes a linear layer first, often
// with a tanh-form GELU after it; chains of pointwise ops, views, cats and rolls over inputs
// that broadcast, are transposed, sliced, misaligned or empty, then optionally a reduction,
// softmax, log_softmax, layer norm or var, with one or two outputs) compiled by torchfuse and
// compared with eager PyTorch and with an f64 evaluation. A result is right where it is within
// the dtype's tolerance of the f64 answer or of eager's, with NaN and inf where one of them
// has them.
//
// Without --gpu, each case is imported and fused, the fused graph runs on the reference
// executor (ATen, CPU) and every kernel is compiled with NVRTC for sm_90; with --gpu the
// compiled module runs its kernels on the GPU. A failing case is printed as its module source
// and input specs, and saved under --out. The last line is `fuzz: N cases, W wrong, C crashed`;
// the exit status is non-zero on any wrong or crashed case.
//
//   torchfuse_fuzz [--seconds N] [--cases N] [--seed S] [--threads T] [--gpu] [--out DIR]
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend_torch/model_source.h"
#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "runtime/compiled_module.h"
#include "runtime/inspect.h"
#include "runtime/lowering.h"

namespace torchfuse {
namespace {

// One input: its shape, how it is laid out, its dtype.
struct InputSpec {
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
  enum Layout { kContiguous, kTransposed, kSliced, kExpanded } layout = kContiguous;
  std::string ToString() const {
    const char* l[] = {"contiguous", "transposed", "sliced", "expanded"};
    return absl::StrCat(c10::toString(dtype), "[", absl::StrJoin(sizes, ","), "] ", l[layout]);
  }
};

struct Case {
  std::string source;
  std::vector<InputSpec> inputs;
  // The kernels' variants: a row or column strategy or whole variant, and the elementwise
  // kernels' block size and unroll; empty and 0 for the heuristic's choice. On the GPU they
  // run; without one, the forced row and column variants are what NVRTC compiles.
  std::string row_strategy;
  int block_size = 0;
  int unroll = 0;
  std::string VariantString() const {
    return absl::StrCat("row_strategy='", row_strategy, "' block_size=", block_size,
                        " unroll=", unroll);
  }
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  // `gpu`: the case runs on the GPU (f16 inputs, long rows, forced kernel variants).
  Case Next(bool gpu) {
    Case c;
    const int rank = Pick(1, 3);
    static const int64_t kDims[] = {1, 2, 3, 7, 16, 33, 128, 1000};
    std::vector<int64_t> base;
    for (int d = 0; d < rank; ++d) base.push_back(kDims[Pick(0, 7)]);
    if (Chance(0.03)) base[Pick(0, rank - 1)] = 0;  // an empty tensor
    // Long rows (a vocabulary's, an odd length past a block's registers), on the GPU.
    static const int64_t kLongRows[] = {1023, 4099, 50257};
    const bool long_row = gpu && Chance(0.05);
    if (long_row) base.back() = kLongRows[Pick(0, 2)];
    // Keep cases small.
    const int64_t max_numel = long_row ? (int64_t{1} << 18) : (int64_t{1} << 16);
    int64_t numel = 1;
    for (int64_t d : base) numel *= std::max<int64_t>(d, 1);
    while (numel > max_numel) {
      const int d = long_row && rank > 1 ? Pick(0, rank - 2) : Pick(0, rank - 1);
      numel /= std::max<int64_t>(base[d], 1);
      base[d] = std::max<int64_t>(1, base[d] / 4);
      numel *= base[d];
    }
    // f16 has no CPU kernels for most ops: the CPU mode draws f32, bf16 and f64.
    std::vector<at::ScalarType> types = {at::kFloat, at::kBFloat16, at::kDouble};
    if (gpu) types.push_back(at::kHalf);
    const at::ScalarType dtype = types[Pick(0, static_cast<int>(types.size()) - 1)];
    const int ninputs = Pick(1, 3);
    for (int i = 0; i < ninputs; ++i) {
      InputSpec s;
      s.sizes = base;
      s.dtype = Chance(0.2) ? types[Pick(0, static_cast<int>(types.size()) - 1)] : dtype;
      if (i > 0 && Chance(0.4)) {  // broadcast: size-1 dims, or only the trailing dims
        if (Chance(0.5)) {
          for (auto& d : s.sizes) {
            if (Chance(0.5)) d = 1;
          }
        } else {
          s.sizes.erase(s.sizes.begin(), s.sizes.begin() + Pick(0, rank - 1));
        }
      }
      const int l = Pick(0, 9);
      if (l == 7 && s.sizes.size() >= 2) s.layout = InputSpec::kTransposed;
      if (l == 8) s.layout = InputSpec::kSliced;
      if (l == 9) s.layout = InputSpec::kExpanded;
      c.inputs.push_back(s);
    }
    // The program: values v0.. from the inputs, then up to 8 pointwise ops.
    std::vector<std::string> names;
    std::string args;
    for (int i = 0; i < ninputs; ++i) {
      names.push_back(absl::StrCat("x", i));
      absl::StrAppend(&args, ", x", i);
    }
    std::string body;
    // Sometimes a linear layer of x0 first (a weight and a bias of its row length as two more
    // inputs; addmm of the flattened rows, viewed back, as ATen writes a 3-D one), often
    // followed by a tanh-form GELU or a ReLU: the products' epilogues and moved biases.
    const int64_t n = c.inputs[0].sizes.back();
    const bool product = Chance(0.15) && n > 0;
    if (product) {
      for (std::vector<int64_t> sizes : {std::vector<int64_t>{n, n}, std::vector<int64_t>{n}}) {
        InputSpec s;
        s.sizes = sizes;
        s.dtype = c.inputs[0].dtype;
        c.inputs.push_back(s);
      }
      absl::StrAppend(&args, ", w, b");
      const std::string scaled = absl::StrCat("w * ", 1.0 / std::sqrt(n));
      absl::StrAppend(&body, "    p = ", Chance(0.5)
          ? absl::StrCat("torch.linear(x0, ", scaled, ", b)")
          : absl::StrCat("torch.addmm(b, x0.reshape(-1, ", n, "), (", scaled,
                         ").t()).reshape(x0.shape)"), "\n");
      names.push_back("p");
      const int activation = Pick(0, 3);
      if (activation < 2) {
        absl::StrAppend(&body, "    g = 0.5 * p * (1.0 + torch.tanh(0.7978845608 * (p + 0.044715 "
                               "* torch.pow(p, 3.0))))\n");
        names.push_back("g");
      } else if (activation == 2) {
        absl::StrAppend(&body, "    g = torch.relu(p)\n");
        names.push_back("g");
      }
    }
    const int ops = Pick(product ? 0 : 1, 8);
    for (int k = 0; k < ops; ++k) {
      const std::string a = names[Pick(0, static_cast<int>(names.size()) - 1)];
      const std::string b = names[Pick(0, static_cast<int>(names.size()) - 1)];
      const std::string v = absl::StrCat("v", k);
      static const char* kUnary[] = {
          "-{a}", "torch.exp(torch.clamp({a}, -10.0, 10.0))", "torch.log(torch.abs({a}) + 1.0)",
          "torch.tanh({a})", "torch.sigmoid({a})", "torch.relu({a})", "torch.sqrt(torch.abs({a}))",
          "torch.rsqrt(torch.abs({a}) + 0.5)", "torch.abs({a})", "torch.sin({a})", "torch.cos({a})",
          "torch.erf({a})", "{a} * 0.5 * (1.0 + torch.tanh(0.7978845608 * ({a} + 0.044715 * {a} * {a} * {a})))",
          "{a} * torch.sigmoid({a})", "{a}.float()", "{a} * 2.5 + 1.0", "torch.clamp({a}, -1.0, 1.0)",
          // MobileNet's activations (clamps and pointwise ops at import).
          "torch.hardswish({a} * 3.0)", "torch.relu6({a} * 4.0)", "torch.hardtanh({a}, -0.5, 1.5)",
          "torch.hardsigmoid({a} * 3.0)",
          // Views and indexing read inside kernels: a rotation through slices and cat, chunks
          // put back together, a stack reduced over its new dim, a mask filled in.
          "torch.cat(({a}[..., 1:], {a}[..., :1]), -1)",
          "torch.cat({a}.chunk(2, -1), -1) * 1.5",
          "torch.stack(({a}, {a} * 0.5), 0).amax(0)",
          "{a}.masked_fill({a} > 1.0, -3.0)",
          "{a}.unsqueeze(0).squeeze(0) - 0.25",
          // Rows picked by an index the graph computes (arange - 1: one negative, counted from
          // the end): the gather kernel of `table[indices]` on the GPU.
          "{a}[torch.arange({a}.size(0)) - 1] * 1.25",
          // An in-place op on a fresh value (made functional at import).
          "torch.relu_({a} * 1.5 - 0.25)",
          // The same rows picked after a slice ([None, i]: an index list that holds None).
          "{a}.unsqueeze(0)[:, torch.arange({a}.size(0)) - 1].squeeze(0) + 0.5",
          // Rolls: of the last dim, of two dims (the same one where there is one), by more
          // than a small dim's size, backwards.
          "torch.roll({a}, 1, -1) * 0.75",
          "torch.roll({a}, (-3, 2), (0, -1))",
          "torch.roll({a} + 1.0, 5, 0)",
          // One position a row scattered (a loss gradient's one-hot), a value along the last
          // dim and a source along the first: imported as a where over the positions.
          "{a} + torch.zeros_like({a}).scatter(-1, {a}.argmax(-1, keepdim=True), -1.0)",
          "{a}.scatter(0, {a}.argmin(0, keepdim=True), {a}[:1] * 2.0)"};
      static const char* kBinary[] = {
          "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / (torch.abs({b}) + 1.0)",
          "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.where({a} > {b}, {a}, {b} * 0.5)",
          "torch.pow(torch.abs({a}) + 0.1, 1.5)"};
      // Writes in place into a fresh value, through slices and selects (made functional at
      // import: the functional op on the view scattered back), chained, after a read of a view
      // of it, and in a loop.
      static const char* kStatements[] = {
          "{v} = {a} * 1.5\n    {v}[..., 1:] = {a}[..., :-1] * 0.5",
          "{v} = {a} + 0.5\n    {v}[0] = {v}[-1] * 2.0",
          "{v} = {a} - 0.25\n    {v}.mul_(2.0).sub_({v}.sum(-1, keepdim=True))",
          "{v} = {a} * 0.5\n    {v}[..., :1] += 1.0\n    {v}[1:].relu_()",
          // A loop of a constant trip count (unrolled at import), writing in place.
          "{v} = {a} + 0.125\n    for i in range(3):\n        {v}.mul_(0.75).add_(float(i))"};
      constexpr int kUnaryCount = sizeof(kUnary) / sizeof(kUnary[0]);
      constexpr int kBinaryCount = sizeof(kBinary) / sizeof(kBinary[0]);
      constexpr int kStatementCount = sizeof(kStatements) / sizeof(kStatements[0]);
      if (Chance(0.08)) {
        const std::string st = kStatements[Pick(0, kStatementCount - 1)];
        absl::StrAppend(&body, "    ", Replace(Replace(st, "{v}", v), "{a}", a), "\n");
        names.push_back(v);
        continue;
      }
      std::string e = Chance(0.5) ? kUnary[Pick(0, kUnaryCount - 1)]
                                  : kBinary[Pick(0, kBinaryCount - 1)];
      e = Replace(Replace(e, "{a}", a), "{b}", b);
      absl::StrAppend(&body, "    ", v, " = ", e, "\n");
      names.push_back(v);
    }
    std::string last = names.back();
    std::string extra = names[Pick(0, static_cast<int>(names.size()) - 1)];
    const int tail = Pick(0, 13);
    std::string out = last;
    switch (tail) {
      case 0: out = absl::StrCat(last, ".sum(-1)"); break;
      case 1: out = absl::StrCat(last, ".mean(-1, keepdim=True)"); break;
      case 2: out = absl::StrCat(last, ".amax(-1)"); break;
      case 3: out = absl::StrCat("torch.softmax(", last, ", -1)"); break;
      case 4: out = absl::StrCat("torch.log_softmax(", last, ", -1)"); break;
      case 5: out = absl::StrCat("torch.layer_norm(", last, ", [", last, ".size(-1)])"); break;
      case 6: out = absl::StrCat(last, ".var(-1, keepdim=True)"); break;
      case 7: out = absl::StrCat(last, ".sum(0)"); break;
      // Over the last two dims: a row reduction over them merged where there are more.
      case 8: out = absl::StrCat(last, ".mean((-2, -1), keepdim=True)"); break;
      case 9: out = absl::StrCat(last, ".amax((-2, -1))"); break;
      // A sum viewed as rows for a layer norm (a residual add before a transformer's norm):
      // the view moves before the add where its operands can be had as rows.
      case 10:
        out = absl::StrCat("torch.layer_norm((", last, " + ", extra, ").reshape(-1, ", last,
                           ".size(-1)), [", last, ".size(-1)])");
        break;
      // The residual stream of a transformer whose norms alternate between [B, T, C] and
      // rows [B*T, C] (OPT): one norm reads the stream as it is (in f16/bf16 through its cast
      // to f32), and the stream plus an input (the projection's result there, or a copy of
      // it, as OPT's dropout leaves one in an inference graph) is viewed as rows for the next
      // norm. The view moves before that add where the stream is stored anyway.
      case 11:
        absl::StrAppend(&body, "    s = ", last, " + ", names[Pick(0, ninputs - 1)],
                        Chance(0.5) ? ".clone()" : "", "\n");
        out = absl::StrCat("torch.layer_norm(", last, ", [", last, ".size(-1)]) + "
                           "torch.layer_norm(s.reshape(-1, s.size(-1)), [s.size(-1)])"
                           ".reshape(s.shape)");
        break;
      default: break;
    }
    absl::StrAppend(&body, "    out = ", out, "\n");
    const bool two = Chance(0.3);
    absl::StrAppend(&body, two ? absl::StrCat("    return (out, ", extra, ")\n")
                               : "    return out\n");
    c.source = absl::StrCat("def forward(self", args, "):\n", body);
    static const char* kRowStrategies[] = {
        "warp", "block", "looped", "cluster", "warp_t8_r4", "warp_t32_r1", "block_t64",
        "block_t1024", "block_t256_nokeep", "looped_t128_u1", "looped_t512_u4",
        "cluster_t128_c2", "cluster_t256_c8", "cluster_t1024_c4_nokeep", "looped_t256_u2_l2",
        "looped_t128_u2_sm", "looped_t512_u1_l2_sm", "col_x32_y8_s1", "col_x32_y32_s8",
        "col_x8_y4_s2", "col_x16_y16_s64"};
    constexpr int kCount = sizeof(kRowStrategies) / sizeof(kRowStrategies[0]);
    if (!gpu && Chance(0.3)) c.row_strategy = kRowStrategies[Pick(0, kCount - 1)];
    if (gpu && Chance(0.5)) {  // else the heuristic's variants
      if (Chance(0.7)) c.row_strategy = kRowStrategies[Pick(0, kCount - 1)];
      static const int kBlocks[] = {0, 32, 64, 256, 1024};
      static const int kUnrolls[] = {0, 1, 2, 4};
      c.block_size = kBlocks[Pick(0, 4)];
      c.unroll = kUnrolls[Pick(0, 3)];
    }
    return c;
  }

 private:
  static std::string Replace(std::string s, const std::string& from, const std::string& to) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) {
      s.replace(p, from.size(), to);
    }
    return s;
  }
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  std::mt19937_64 rng_;
};

// An input tensor laid out as `s` says, on `device`: random normal values in its dtype, then
// the view (a transpose, a slice one element in, a broadcast row).
at::Tensor MakeInput(const InputSpec& s, at::Device device, uint64_t seed) {
  // A generator of its own: the same values whatever other threads draw.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto random = [&](const std::vector<int64_t>& sizes) {
    return at::randn(sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(s.dtype).to(device);
  };
  const int64_t last = static_cast<int64_t>(s.sizes.size()) - 1;
  switch (s.layout) {
    case InputSpec::kTransposed: {
      std::vector<int64_t> swapped = s.sizes;
      std::swap(swapped[0], swapped.back());
      return random(swapped).transpose(0, last);
    }
    case InputSpec::kSliced: {
      if (s.sizes.empty()) return random(s.sizes);
      std::vector<int64_t> wider = s.sizes;
      wider.back() += 3;
      return random(wider).narrow(last, 1, s.sizes.back());
    }
    case InputSpec::kExpanded: {
      if (s.sizes.empty()) return random(s.sizes);
      std::vector<int64_t> row(s.sizes.size(), 1);
      row.back() = s.sizes.back();
      return random(row).expand(s.sizes);
    }
    default: return random(s.sizes);
  }
}

double Tolerance(at::ScalarType t) {
  return t == at::kDouble ? 1e-9 : t == at::kFloat ? 1e-4 : 3e-2;
}

// The floor under a reference's size in Relative, for `n` elements.
double RelativeFloor(int64_t n) { return 1e-3 * std::sqrt(static_cast<double>(n)); }

// The relative error of `a` against the reference `b` (finite entries of one size), with a
// floor under the reference's size: a result that should be 0 (a layer norm of a constant
// row) is judged by its absolute error, since ATen's own f64 answer there is rounding noise
// around 0.
double Relative(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a - b).norm().item<double>() /
         std::max(b.norm().item<double>(), RelativeFloor(b.numel()));
}

// Is `got` right against `eager` and `exact` (the f64 run)? Empty string when it is.
// `least` is the least precise floating dtype among the case's inputs (and f32 where the
// program casts to it) and this output: a result computed from bf16 values is judged at
// bf16's tolerance even where it is f64. `sensitivity` is how far the f64 run's output moves
// when its inputs move by the rounding of `least` (Sensitivity): a program whose comparison
// sits within rounding of its threshold (masked_fill(v > 1.0) of a v that is 1.003 exactly
// and 1.0 in bf16) has two right answers, and either eager or torchfuse may round to each.
std::string Judge(const at::Tensor& got, const at::Tensor& eager, const at::Tensor& exact,
                  at::ScalarType least, double sensitivity = 0) {
  if (got.sizes() != eager.sizes()) {
    return absl::StrCat("shape ", c10::str(got.sizes()), " instead of ", c10::str(eager.sizes()));
  }
  if (got.scalar_type() != eager.scalar_type()) {
    return absl::StrCat("dtype ", c10::toString(got.scalar_type()), " instead of ",
                        c10::toString(eager.scalar_type()));
  }
  if (got.numel() == 0) return "";
  const at::Tensor g = got.to(at::kDouble).cpu(), e = eager.to(at::kDouble).cpu(),
                   x = exact.to(at::kDouble).cpu();
  // Where a value is not finite it must be what eager or the exact run has there: NaN for NaN,
  // the same infinity; an f16/bf16 overflow may be inf where eager has NaN.
  const at::Tensor gf = g.isfinite(), ef = e.isfinite(), xf = x.isfinite();
  const bool half = eager.scalar_type() == at::kHalf || eager.scalar_type() == at::kBFloat16;
  at::Tensor inf_ok = g.eq(e).logical_or(g.eq(x));
  if (half) {
    inf_ok = inf_ok.logical_or(e.isnan());
    // At the edge of the range (the exact value within the dtype's tolerance of the largest
    // finite value, or beyond it) rounding decides between that value and inf: inf of the
    // exact value's sign is right there, as eager's largest finite value is.
    const double largest = eager.scalar_type() == at::kHalf
                               ? static_cast<double>(std::numeric_limits<c10::Half>::max())
                               : static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    const double edge = largest * (1 - Tolerance(eager.scalar_type()));
    inf_ok = inf_ok.logical_or(x.abs().ge(edge).logical_and(g.sign().eq(x.sign())));
  }
  const at::Tensor nonfinite_ok = gf.logical_or(g.isnan().logical_and(e.isnan().logical_or(x.isnan())))
                                      .logical_or(g.isinf().logical_and(inf_ok));
  if (!nonfinite_ok.all().item<bool>()) return "NaN or inf where neither eager nor f64 has it";
  const at::Tensor both = gf.logical_and(ef).logical_and(xf);
  // The finite entries of each, selected once.
  const at::Tensor gm = g.masked_select(both), em = e.masked_select(both),
                   xm = x.masked_select(both);
  const double floor = RelativeFloor(xm.numel());
  const double tol = std::max(Tolerance(eager.scalar_type()), Tolerance(least));
  const double to_eager = Relative(gm, em), to_exact = Relative(gm, xm),
               eager_own = Relative(em, xm);
  if (to_eager <= tol || to_exact <= std::max({tol, 2 * eager_own, 2 * sensitivity})) return "";
  // In an all-f64 program the f64 run is eager's own computation, so where its result is
  // below the floor it may be ATen's rounding noise around an exact 0: its f64 layer norm of
  // a constant row computes x * rstd - mean * rstd, 1e-9 off 0 where the row's values are
  // ~2e4 (exp of 10). A result within twice that noise's size of it (exact zeros) is right.
  if (least == at::kDouble && eager.scalar_type() == at::kDouble) {
    const double noise = xm.norm().item<double>();
    if (noise < floor && (gm - xm).norm().item<double>() <= 2 * noise) return "";
  }
  return absl::StrCat("relative error ", to_eager, " against eager, ", to_exact,
                      " against f64 (eager's own ", eager_own,
                      sensitivity > 0 ? absl::StrCat("; f64's under rounding ", sensitivity) : "",
                      ")");
}

std::vector<at::Tensor> Tensors(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> out;
  for (const c10::IValue& e : v.toTuple()->elements()) out.push_back(e.toTensor());
  return out;
}

// The unit roundoff of a floating dtype.
double Roundoff(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return std::ldexp(1.0, -8);
    case at::kHalf: return std::ldexp(1.0, -11);
    case at::kFloat: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

// Per output, the largest relative change of the f64 program `in_double`'s outputs over runs
// whose floating inputs are moved by the roundoff of `least`: all scaled by 1 + u and by
// 1 - u, and twice each element by its own factor in [1 - u, 1 + u] (a generator of its own,
// seeded by `seed`). Rounding the program's values to `least` moves them about as much.
std::vector<double> Sensitivity(const frontend::ModelSource& in_double,
                                const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& exact, at::ScalarType least,
                                uint64_t seed) {
  const double u = Roundoff(least);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<double> worst(exact.size(), 0.0);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<c10::IValue> moved;
    for (const at::Tensor& t : inputs) {
      at::Tensor d = t.to(at::kDouble);
      if (t.is_floating_point()) {
        if (trial < 2) {
          d = d * (trial == 0 ? 1 + u : 1 - u);
        } else {
          const at::Tensor r = at::rand(d.sizes(), gen, at::TensorOptions().dtype(at::kDouble));
          d = d * (1 + u * (2 * r.to(d.device()) - 1));
        }
      }
      moved.push_back(d);
    }
    std::vector<at::Tensor> out = Tensors(in_double.RunEager(moved));
    for (size_t i = 0; i < out.size() && i < exact.size(); ++i) {
      const at::Tensor a = out[i].to(at::kDouble).cpu(), b = exact[i].to(at::kDouble).cpu();
      if (a.sizes() != b.sizes() || a.numel() == 0) continue;
      const at::Tensor both = a.isfinite().logical_and(b.isfinite());
      worst[i] = std::max(worst[i], Relative(a.masked_select(both), b.masked_select(both)));
    }
  }
  return worst;
}


// Runs one case; "" when right, else what is wrong.
std::string RunCase(const Case& c, bool gpu, uint64_t seed) {
  torch::jit::Module m("Fuzz");
  m.define(c.source);
  m.eval();
  const at::Device device = gpu ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  std::vector<at::Tensor> inputs;
  std::vector<graph::TensorType> types;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    inputs.push_back(MakeInput(c.inputs[i], device, seed + i));
    auto dt = frontend::FromScalarType(c.inputs[i].dtype);
    if (!dt.ok()) return std::string(dt.status().message());
    types.push_back({*dt, c.inputs[i].sizes});
  }
  std::vector<c10::IValue> in(inputs.begin(), inputs.end());
  std::vector<at::Tensor> eager;
  try {
    eager = Tensors(m.forward(in));
  } catch (const std::exception&) {
    return "";  // eager rejects the program (dtype mix, empty amax): nothing to compare
  }
  std::vector<c10::IValue> in64;
  for (const at::Tensor& t : inputs) in64.push_back(t.to(at::kDouble));
  auto source = frontend::ModelSource::FromModule(m);
  if (!source.ok()) return absl::StrCat("capture: ", source.status().message());
  const frontend::ModelSource in_double = source->InDouble();
  std::vector<at::Tensor> exact = Tensors(in_double.RunEager(in64));
  std::vector<at::Tensor> got;
  if (gpu) {
    Options options;
    options.tune_budget_ms = 0;  // the case's variants, not the tuner's
    options.row_strategy = c.row_strategy;
    options.block_size = c.block_size;
    options.unroll = c.unroll;
    CompiledModule compiled = Compile(m, options);
    got = Tensors(compiled.forward(in));
  } else {
    Options options;
    auto fused = ImportAndFuse(*source->graph(), types, options);
    if (!fused.ok()) return absl::StrCat("import and fuse: ", fused.status().message());
    auto ran = frontend::RunReference(*fused, inputs);
    if (!ran.ok()) return absl::StrCat("fused graph: ", ran.status().message());
    got = *ran;
    Options forced;
    forced.row_strategy = c.row_strategy;
    auto report = InspectSource(*source, types, 90, /*want_ptx=*/false, forced);
    if (!report.ok()) return absl::StrCat("inspect: ", report.status().message());
    for (const KernelReport& k : report->kernels) {
      if (!k.error.empty()) return absl::StrCat("NVRTC: ", k.kernel_name, ": ", k.error.substr(0, 300));
    }
  }
  if (got.size() != eager.size()) {
    return absl::StrCat(got.size(), " outputs instead of ", eager.size());
  }
  at::ScalarType least = at::kDouble;
  for (const InputSpec& in : c.inputs) {
    if (Tolerance(in.dtype) > Tolerance(least)) least = in.dtype;
  }
  // A program that casts to f32 on the way (`.float()`) computes in f32 there, whatever its
  // inputs' and outputs' dtypes: f64 inputs and outputs judged at f64's tolerance would flag
  // f32 rounding as wrong.
  if (c.source.find(".float()") != std::string::npos &&
      Tolerance(at::kFloat) > Tolerance(least)) {
    least = at::kFloat;
  }
  std::vector<double> sensitivity;  // computed for the first output judged wrong
  for (size_t i = 0; i < got.size(); ++i) {
    std::string why = Judge(got[i], eager[i], exact[i], least);
    if (!why.empty() && sensitivity.empty()) {
      sensitivity = Sensitivity(in_double, inputs, exact, least, seed ^ 0x5e9517);
    }
    if (!why.empty() && i < sensitivity.size()) {
      why = Judge(got[i], eager[i], exact[i], least, sensitivity[i]);
    }
    if (!why.empty()) return absl::StrCat("output ", i, ": ", why);
  }
  return "";
}

// Counts of one stream of cases.
struct Tally {
  int64_t cases = 0, wrong = 0, crashed = 0;
};

// Runs cases from `seed`'s generator until `max_cases` (if >= 0) or the deadline; with `only`
// > 0, that case alone (the ones before it are generated, not run: a case's program and its
// inputs depend on its seed and number only).
Tally RunStream(uint64_t seed, bool gpu, int64_t max_cases, double seconds, int64_t only,
                const std::string& out_dir, std::mutex* print_mu) {
  Generator gen(seed);
  const auto start = std::chrono::steady_clock::now();
  Tally t;
  int64_t generated = 0;
  // The case in flight, on disk: what a process that dies leaves behind.
  const std::string running =
      out_dir.empty() ? "" : absl::StrCat(out_dir, "/running_", seed, ".txt");
  while (max_cases < 0 || t.cases < max_cases) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (max_cases < 0 && only <= 0 && elapsed >= seconds) break;
    const Case c = gen.Next(gpu);
    const int64_t number = ++generated;  // 1-based: `--cases <number>` ends with this case
    if (only > 0 && number < only) continue;
    auto describe = [&](const std::string& why) {
      std::ostringstream report;
      report << "== case " << number << " (seed " << seed << "): " << why << "\n";
      for (const InputSpec& s : c.inputs) report << "# input " << s.ToString() << "\n";
      if (gpu || !c.row_strategy.empty()) report << "# variants " << c.VariantString() << "\n";
      report << c.source;
      return report.str();
    };
    if (!running.empty()) std::ofstream(running) << describe("the process died in this case");
    std::string why;
    bool crash = false;
    try {
      why = RunCase(c, gpu, seed * 1000003 + (number - 1));
    } catch (const std::exception& e) {
      why = absl::StrCat("exception: ", std::string(e.what()).substr(0, 400));
      crash = true;
    }
    ++t.cases;
    if (only > 0) max_cases = t.cases;  // that case was the last
    if (why.empty()) continue;
    (crash ? t.crashed : t.wrong) += 1;
    const std::string report = describe(why);
    {
      std::lock_guard<std::mutex> lock(*print_mu);
      std::cout << report << std::flush;
    }
    if (!out_dir.empty()) {
      std::ofstream(absl::StrCat(out_dir, "/case_", seed, "_", number, ".txt")) << report;
    }
  }
  if (!running.empty()) std::remove(running.c_str());
  return t;
}

int Main(int argc, char** argv) {
  double seconds = 60;
  int64_t max_cases = -1;
  uint64_t seed = 1;
  int threads = 1;
  bool gpu = false;
  std::string out_dir;
  int64_t only = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seconds") seconds = std::stod(next());
    else if (a == "--cases") max_cases = std::stoll(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--threads") threads = std::max(1, std::stoi(next()));
    else if (a == "--gpu") gpu = true;
    else if (a == "--out") out_dir = next();
    else if (a == "--only") only = std::stoll(next());
    else {
      std::cerr << "usage: torchfuse_fuzz [--seconds N] [--cases N] [--seed S] [--threads T] "
                   "[--gpu] [--out DIR] [--only NUMBER]\n";
      return 2;
    }
  }
  if (only > 0) threads = 1;  // case NUMBER of `seed`'s stream
  if (!out_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    if (error) {
      std::cerr << "torchfuse_fuzz: cannot make " << out_dir << ": " << error.message() << "\n";
      return 2;
    }
  }
  if (gpu && !torch::cuda::is_available()) {
    std::cerr << "torchfuse_fuzz: --gpu needs a CUDA device\n";
    return 2;
  }
  // Thread t draws from seed + t: a case is reproduced by `--seed <its seed> --only <its
  // number>` (or `--cases <its number>`, which runs the cases before it too) in one thread.
  const auto start = std::chrono::steady_clock::now();
  std::mutex print_mu;
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const int64_t share = max_cases < 0 ? -1 : (max_cases + threads - 1 - t) / threads;
    pool.emplace_back([&, t, share] {
      tallies[t] = RunStream(seed + t, gpu, share, seconds, only, out_dir, &print_mu);
    });
  }
  for (std::thread& th : pool) th.join();
  Tally total;
  for (const Tally& t : tallies) {
    total.cases += t.cases;
    total.wrong += t.wrong;
    total.crashed += t.crashed;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "fuzz: " << total.cases << " cases, " << total.wrong << " wrong, " << total.crashed
            << " crashed (" << static_cast<int>(elapsed) << " s, "
            << (threads == 1 ? absl::StrCat("seed ", seed)
                             : absl::StrCat("seeds ", seed, "..", seed + threads - 1))
            << ", " << (gpu ? "GPU" : "CPU: fused graph on the reference executor, NVRTC for sm_90")
            << ")\n";
  return total.wrong + total.crashed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace torchfuse

int main(int argc, char** argv) { return torchfuse::Main(argc, argv); }
