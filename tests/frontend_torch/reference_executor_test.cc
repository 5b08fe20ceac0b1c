#include "frontend_torch/reference_executor.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <limits>
#include <torch/cuda.h>
#include <torch/script.h>

#include "absl/strings/str_cat.h"
#include "frontend_torch/torch_types.h"
#include "frontend_torch/torchscript_importer.h"
#include "fusion/decompose_row_ops.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "test_models.h"

namespace torchfuse::frontend {
namespace {

using graph::DType;
using testing::TestModel;

using testing::Flatten;
using testing::RelativeError;

// The CPU, and the first GPU where there is one.
std::vector<at::Device> CpuAndGpu() {
  std::vector<at::Device> devices = {at::kCPU};
  if (torch::cuda::is_available()) devices.push_back(at::Device(at::kCUDA, 0));
  return devices;
}

class ReferenceExecutorTest : public ::testing::TestWithParam<TestModel> {};

// import -> evaluate equals the module's own eager output, on fresh random inputs.
TEST_P(ReferenceExecutorTest, MatchesEagerModule) {
  const TestModel& tm = GetParam();
  auto module = LoadModule(tm.path);
  ASSERT_TRUE(module.ok()) << module.status();
  module->eval();
  auto model = ImportModule(*module, tm.inputs);
  ASSERT_TRUE(model.ok()) << model.status();
  for (int trial = 0; trial < 2; ++trial) {
    std::vector<at::Tensor> inputs;
    std::vector<c10::IValue> ivalues;
    for (const graph::TensorType& t : tm.inputs) {
      inputs.push_back(RandomTensor(t, at::kCPU));
      ivalues.push_back(inputs.back());
    }
    ASSERT_GT(inputs[0].abs().sum().item<double>(), 0.0);
    std::vector<at::Tensor> want = Flatten(module->forward(ivalues));
    auto got = RunReference(*model, inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].sizes(), want[i].sizes());
      EXPECT_EQ((*got)[i].scalar_type(), want[i].scalar_type());
      EXPECT_LE(RelativeError((*got)[i], want[i]), 1e-6) << tm.name << " output " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceExecutorTest,
                         ::testing::ValuesIn(testing::ReadManifest()), testing::ModelName);

// The memory-efficient attention kernel's mask: rows of 49 keys (a contiguous mask, one
// expanded along the batch, one whose rows torchfuse left unpadded after a slice of a padding)
// come back with every stride a multiple of 8, the broadcast dims still broadcast, the same
// values; an aligned mask and other attention ops' masks are handed over as they are.
TEST(ReferenceExecutorOpsTest, EfficientAttentionMasksGetAlignedRows) {
  const std::string efficient = "aten::_scaled_dot_product_efficient_attention";
  const at::Tensor q = at::randn({4, 3, 49, 32});
  const at::Tensor full = at::randn({4, 3, 49, 49});
  const at::Tensor per_head = at::randn({1, 3, 49, 49}).expand({4, 3, 49, 49});
  const at::Tensor padded = at::randn({4, 3, 49, 56}).narrow(-1, 0, 49);
  for (const at::Tensor& mask : {full, per_head}) {
    std::vector<at::Tensor> out = AttentionOperands(efficient, {q, q, q, mask});
    ASSERT_EQ(out.size(), 4u);
    const at::Tensor& m = out[3];
    EXPECT_EQ(m.sizes(), mask.sizes());
    for (int64_t d = 0; d < m.dim(); ++d) {
      EXPECT_EQ(m.stride(d) % 8, d + 1 == m.dim() ? 1 : 0) << d << " " << m.strides();
      if (mask.stride(d) == 0) {
        EXPECT_EQ(m.stride(d), 0) << d;
      }
    }
    EXPECT_TRUE(at::equal(m, mask));
    EXPECT_TRUE(out[0].is_same(q));
  }
  // Already aligned: the same tensor; another attention op: no padding.
  EXPECT_TRUE(AttentionOperands(efficient, {q, q, q, padded})[3].is_same(padded));
  EXPECT_TRUE(AttentionOperands("aten::scaled_dot_product_attention", {q, q, q, full})[3]
                  .is_same(full));
  // Rows of stride other than 1 are made contiguous for every attention op.
  const at::Tensor kt = at::randn({4, 3, 32, 49}).transpose(-2, -1);
  const at::Tensor k = AttentionOperands("aten::scaled_dot_product_attention", {q, kt, q})[1];
  EXPECT_EQ(k.stride(-1), 1);
  EXPECT_TRUE(at::equal(k, kt));
}

// Query, key and value in another layout than [B, H, T, D] (a [B, T, H, D] tensor viewed as
// [B, H, T, D], its copy dropped in the graph) are handed over as they are where their rows
// start 16 bytes apart at a 16-byte address; otherwise they are copied, with the same values.
TEST(ReferenceExecutorOpsTest, AttentionOperandsKeepAlignedViews) {
  const std::string cudnn = "aten::_scaled_dot_product_cudnn_attention";
  const at::Tensor bthd = at::randn({2, 16, 4, 32}).permute({0, 2, 1, 3});
  std::vector<at::Tensor> out = AttentionOperands(cudnn, {bthd, bthd, bthd});
  for (const at::Tensor& t : out) EXPECT_TRUE(t.is_same(bthd));
  // Rows 6 floats (24 bytes) apart: copied.
  const at::Tensor odd = at::randn({2, 16, 4, 6}).permute({0, 2, 1, 3});
  const at::Tensor k = AttentionOperands(cudnn, {bthd, odd, bthd})[1];
  EXPECT_FALSE(k.is_same(odd));
  EXPECT_TRUE(k.is_contiguous());
  EXPECT_TRUE(at::equal(k, odd));
  // Rows starting one float past a 16-byte address: copied.
  const at::Tensor shifted =
      at::randn({2 * 16 * 4 * 32 + 1}).narrow(0, 1, 2 * 16 * 4 * 32).view({2, 16, 4, 32})
          .permute({0, 2, 1, 3});
  const at::Tensor v = AttentionOperands(cudnn, {bthd, bthd, shifted})[2];
  EXPECT_FALSE(v.is_same(shifted));
  EXPECT_TRUE(at::equal(v, shifted));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data_ptr()) % 16, 0u);
}

TEST(ReferenceExecutorOpsTest, KeepsScalarPromotionRules) {
  auto g = graph::ParseGraph(R"(graph(%x: bf16[4,8]) {
      %c: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %y: bf16[4,8] = mul(%x, %c)
      return(%y)
    })");
  ASSERT_TRUE(g.ok());
  ReferenceExecutor exec(nullptr);
  at::Tensor x = at::randn({4, 8}).to(at::kBFloat16);
  auto out = exec.Run(**g, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal((*out)[0], x * 0.5));
}

// pow with a wrapped number (an FX graph's `y ** 3`, `2.0 ** y`) takes it as a Scalar, as
// eager does, on the CPU and on a GPU.
TEST(ReferenceExecutorOpsTest, PowOfWrappedNumbers) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,8]) {
      %three: i64[] = constant() {dtype="i64", value=3, wrapped=1}
      %two: f64[] = constant() {dtype="f64", value=2.0, wrapped=1}
      %cube: f32[4,8] = pow(%x, %three)
      %exp2: f32[4,8] = pow(%two, %x)
      return(%cube, %exp2)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const at::Device& device : CpuAndGpu()) {
    SCOPED_TRACE(device.str());
    ReferenceExecutor exec(nullptr);
    at::Tensor x = at::randn({4, 8}, at::TensorOptions().device(device));
    auto out = exec.Run(**g, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose((*out)[0], x * x * x, 1e-5, 1e-6));
    EXPECT_EQ((*out)[1].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose((*out)[1], at::exp2(x), 1e-5, 1e-6));
  }
}

// The overloads of the comparison ops that ran, as "ne.Scalar" (RecordFunction's names).
std::vector<std::string>* comparisons_run = nullptr;

std::unique_ptr<at::ObserverContext> RecordComparison(const at::RecordFunction& fn) {
  const auto op = fn.operator_name();
  if (comparisons_run && op) {
    for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      if (op->name == absl::StrCat("aten::", name)) {
        comparisons_run->push_back(absl::StrCat(name, ".", op->overload_name));
      }
    }
  }
  return nullptr;
}

// Comparisons with a wrapped number (`labels != -100`, `0.5 < y`) run their Scalar overloads,
// the number on the right as in eager: a Python dispatch mode active in the caller sees a
// wrapped number as a Python number, which the .Tensor overloads refuse. Maximum and minimum,
// which have no Scalar overload, take it as a tensor of the result's dtype. The values and
// dtypes are eager's (the .Tensor overloads with the wrapped numbers), on the CPU and a GPU.
TEST(ReferenceExecutorOpsTest, ComparisonsAndMinMaxTakeWrappedNumbersAsScalars) {
  auto g = graph::ParseGraph(R"(graph(%labels: i64[64], %y: f32[4,8], %h: bf16[4,8]) {
      %ignore: i64[] = constant() {dtype="i64", value=-100, wrapped=1}
      %half: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %two: i64[] = constant() {dtype="i64", value=2, wrapped=1}
      %kept: bool[64] = ne(%labels, %ignore)
      %same: bool[64] = eq(%labels, %ignore)
      %above: bool[4,8] = lt(%half, %y)
      %atmost: bool[4,8] = ge(%two, %y)
      %below: bool[4,8] = gt(%half, %h)
      %floor: f32[4,8] = maximum(%y, %half)
      %cap: f32[64] = minimum(%labels, %half)
      %hcap: bf16[4,8] = minimum(%two, %h)
      return(%kept, %same, %above, %atmost, %below, %floor, %cap, %hcap)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  auto wrapped = [](at::Scalar v, at::ScalarType d) {
    at::Tensor t = at::scalar_tensor(v, at::TensorOptions().dtype(d));
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  };
  for (const at::Device& device : CpuAndGpu()) {
    SCOPED_TRACE(device.str());
    const at::TensorOptions on = at::TensorOptions().device(device);
    at::Tensor labels = at::randint(-3, 5, {64}, on.dtype(at::kLong));
    labels.index_put_({at::arange(0, 64, 3, on.dtype(at::kLong))}, -100);
    const at::Tensor y = at::randn({4, 8}, on) * 2;
    const at::Tensor h = (at::randn({4, 8}, on) * 2).to(at::kBFloat16);
    const at::Tensor ignore = wrapped(-100, at::kLong), half = wrapped(0.5, at::kDouble),
                     two = wrapped(2, at::kLong);
    const std::vector<at::Tensor> want = {
        at::ne(labels, ignore), at::eq(labels, ignore), at::lt(half, y), at::ge(two, y),
        at::gt(half, h),
        // On the CPU, where a wrapped number may meet these ops' operands.
        at::maximum(y.cpu(), half).to(device), at::minimum(labels.cpu(), half).to(device),
        at::minimum(two, h.cpu()).to(device)};
    std::vector<std::string> ran;
    comparisons_run = &ran;
    const at::CallbackHandle handle =
        at::addThreadLocalCallback(at::RecordFunctionCallback(RecordComparison));
    ReferenceExecutor exec(nullptr);
    auto out = exec.Run(**g, {labels, y, h});
    at::removeCallback(handle);
    comparisons_run = nullptr;
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ((*out)[i].scalar_type(), want[i].scalar_type());
      EXPECT_EQ((*out)[i].device(), device);
      EXPECT_TRUE(at::equal((*out)[i], want[i]));
    }
    // Some labels are ignored and some not; some values on each side of each bound.
    EXPECT_GT(want[0].sum().item<int64_t>(), 0);
    EXPECT_GT(want[1].sum().item<int64_t>(), 0);
    EXPECT_GT(want[2].sum().item<int64_t>(), 0);
    EXPECT_LT(want[2].sum().item<int64_t>(), 32);
    EXPECT_EQ(ran, (std::vector<std::string>{"ne.Scalar", "eq.Scalar", "gt.Scalar", "le.Scalar",
                                             "lt.Scalar"}));
  }
}

// A product with a GELU epilogue (fusion::FuseMatmulEpilogues) computes GELU's tanh form of
// it, on the CPU (where ATen's fused op would take the exact GELU) and on a GPU (cuBLASLt's
// epilogue), for addmm and for a linear layer of a 3-D input.
TEST(ReferenceExecutorOpsTest, ProductsWithAGeluEpilogueComputeItsTanhForm) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[6,16], %w: f32[16,32], %b: f32[32], %z: f32[2,3,16]) {
      %m: f32[6,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0, epilogue="gelu_tanh"}
      %wt: f32[32,16] = transpose(%w) {dim0=0, dim1=1}
      %l: f32[2,3,32] = linear(%z, %wt, %b) {epilogue="gelu_tanh"}
      return(%m, %l)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const at::Device& device : CpuAndGpu()) {
    SCOPED_TRACE(device.str());
    ReferenceExecutor exec(nullptr);
    const auto on = at::TensorOptions().device(device);
    at::Tensor x = at::randn({6, 16}, on), w = at::randn({16, 32}, on), b = at::randn({32}, on);
    at::Tensor z = at::randn({2, 3, 16}, on);
    auto out = exec.Run(**g, {x, w, b, z});
    ASSERT_TRUE(out.ok()) << out.status();
    const at::Tensor m = at::addmm(b, x, w), l = at::linear(z, w.t(), b);
    EXPECT_TRUE(at::allclose((*out)[0], at::gelu(m, "tanh"), 1e-5, 2e-5));
    EXPECT_TRUE(at::allclose((*out)[1], at::gelu(l, "tanh"), 1e-5, 2e-5));
    EXPECT_EQ((*out)[1].sizes(), l.sizes());
    // Not the exact GELU, which differs by up to ~5e-4 over these values.
    EXPECT_GT(((*out)[0] - at::gelu(m)).abs().max().item<double>(), 5e-5);
  }
}

// A product with a ReLU epilogue computes ReLU of the biased product, on the CPU and on a GPU
// (cuBLASLt's epilogue), in bf16, NaN and infinities where torch has them.
TEST(ReferenceExecutorOpsTest, ProductsWithAReluEpilogueComputeItsReluAsTorchDoes) {
  auto g = graph::ParseGraph(R"(graph(%x: bf16[64,32], %w: bf16[32,48], %b: bf16[48], %z: bf16[2,3,32]) {
      %m: bf16[64,48] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0, epilogue="relu"}
      %wt: bf16[48,32] = transpose(%w) {dim0=0, dim1=1}
      %l: bf16[2,3,48] = linear(%z, %wt, %b) {epilogue="relu"}
      return(%m, %l)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const at::Device& device : CpuAndGpu()) {
    SCOPED_TRACE(device.str());
    ReferenceExecutor exec(nullptr);
    const auto on = at::TensorOptions().device(device).dtype(at::kBFloat16);
    at::Tensor x = at::randn({64, 32}, on), w = at::randn({32, 48}, on), b = at::randn({48}, on);
    at::Tensor z = at::randn({2, 3, 32}, on);
    x.index_put_({3, 5}, std::numeric_limits<float>::quiet_NaN());
    x.index_put_({7, 1}, std::numeric_limits<float>::infinity());
    auto out = exec.Run(**g, {x, w, b, z});
    ASSERT_TRUE(out.ok()) << out.status();
    const at::Tensor m = at::relu(at::addmm(b, x, w)), l = at::relu(at::linear(z, w.t(), b));
    EXPECT_TRUE(at::equal((*out)[0].isnan(), m.isnan()));
    EXPECT_GT(m.isnan().sum().item<int64_t>(), 0);
    const at::Tensor finite = m.isfinite();
    EXPECT_TRUE(at::equal((*out)[0].isinf(), m.isinf()));
    EXPECT_TRUE(at::allclose((*out)[0].masked_select(finite).to(at::kFloat),
                             m.masked_select(finite).to(at::kFloat), 2e-2, 2e-2));
    EXPECT_TRUE(at::allclose((*out)[1].to(at::kFloat), l.to(at::kFloat), 2e-2, 2e-2));
    EXPECT_EQ((*out)[1].sizes(), l.sizes());
    EXPECT_EQ(((*out)[0] < 0).sum().item<int64_t>(), 0);
    EXPECT_GT(((*out)[0] == 0).sum().item<int64_t>(), 0);
  }
}

// A scalar constant is made once per device and reused by later runs (no upload per call on
// a GPU), and a graph output that is the constant or a view of it is a copy the caller owns:
// writing into one run's output changes neither the constant nor the next run's.
TEST(ReferenceExecutorOpsTest, ConstantsAreMadeOnceAndNotHandedOut) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,8]) {
      %c: f32[] = constant() {dtype="f32", value=1.5, wrapped=0}
      %y: f32[4,8] = add(%x, %c)
      return(%y, %c)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const at::Device& device : CpuAndGpu()) {
    SCOPED_TRACE(device.str());
    ReferenceExecutor exec(nullptr);
    const graph::Node& constant = *(*g)->nodes()[0];
    const at::Tensor made = exec.Constant(constant, device);
    EXPECT_EQ(made.device(), device);
    EXPECT_EQ(exec.Constant(constant, device).data_ptr(), made.data_ptr());
    EXPECT_TRUE(exec.SharesConstant(made));
    EXPECT_TRUE(exec.SharesConstant(made.expand({4, 8})));
    for (int run = 0; run < 2; ++run) {
      at::Tensor x = at::randn({4, 8}, at::TensorOptions().device(device));
      auto out = exec.Run(**g, {x});
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE(at::equal((*out)[0], x + 1.5));
      EXPECT_NE((*out)[1].data_ptr(), made.data_ptr());
      EXPECT_FALSE(exec.SharesConstant((*out)[1]));
      EXPECT_EQ((*out)[1].item<float>(), 1.5f);
      (*out)[1].fill_(-7.0f);  // the caller's to write into
    }
    EXPECT_EQ(made.item<float>(), 1.5f);
  }
}

TEST(ReferenceExecutorOpsTest, VarWithCorrectionAndClamp) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[6,10]) {
      %v: f32[6,1] = var(%x) {correction=2, dims=[-1], keepdim=1}
      %c: f32[6,10] = clamp(%x) {max=0.5, min=-0.25}
      %s: f32[6,1] = sum(%c) {dims=[1], keepdim=1}
      %r: f32[6,1] = add(%v, %s)
      return(%r)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  ReferenceExecutor exec(nullptr);
  at::Tensor x = at::randn({6, 10});
  auto out = exec.Run(**g, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  at::Tensor want = at::var(x, {1}, /*unbiased=*/false, true) * (10.0 / 8.0) +
                    at::clamp(x, -0.25, 0.5).sum(1, true);
  EXPECT_TRUE(at::allclose((*out)[0], want, 1e-5, 1e-6));
}

// A bf16 variance decomposed for the row kernels (mean, centred squares, their sum) computes
// in f32, as ATen's kernel: rows far from 0 with a small spread, where a mean rounded to bf16
// (a step of 0.5 near 100) would add its rounding error squared to every term.
TEST(ReferenceExecutorOpsTest, DecomposedHalfVarianceComputesInFloat) {
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    const std::string t = dtype;
    auto g = graph::ParseGraph("graph(%x: " + t + "[64,250]) {\n"
                               "  %v: " + t + "[64,1] = var(%x) {correction=1, dims=[-1], keepdim=1}\n"
                               "  %w: " + t + "[64] = var(%x) {correction=0, dims=[-1], keepdim=0}\n"
                               "  return(%v, %w)\n}");
    ASSERT_TRUE(g.ok()) << g.status();
    auto changed = fusion::DecomposeRowOps(g->get());
    ASSERT_TRUE(changed.ok()) << changed.status();
    ASSERT_TRUE(*changed);
    ASSERT_TRUE(graph::VerifyGraph(**g).ok()) << graph::PrintGraph(**g);
    EXPECT_EQ((*g)->outputs()[0]->type().dtype, t == "bf16" ? DType::kBF16 : DType::kF16);
    const at::ScalarType st = t == "bf16" ? at::kBFloat16 : at::kHalf;
    const at::Tensor x = (at::randn({64, 250}) + 100.3).to(st);
    ReferenceExecutor exec(nullptr);
    auto out = exec.Run(**g, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    const at::Tensor x64 = x.to(at::kDouble);
    const at::Tensor want1 = at::var(x64, {1}, /*unbiased=*/true, true);
    const at::Tensor want0 = at::var(x64, {1}, /*unbiased=*/false, false);
    EXPECT_EQ((*out)[0].scalar_type(), st);
    // Within the output's rounding (2^-8 relative for bf16) of the exact variance.
    EXPECT_LE(RelativeError((*out)[0].to(at::kDouble), want1), 1e-2);
    EXPECT_LE(RelativeError((*out)[1].to(at::kDouble), want0), 1e-2);
    EXPECT_LE(RelativeError((*out)[0], at::var(x, {1}, true, true)), 1e-2);
  }
}

TEST(ReferenceExecutorOpsTest, ParamWithoutDataIsAnError) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4]) {
      %w: f32[4] = param() {name="w"}
      %y: f32[4] = add(%x, %w)
      return(%y)
    })");
  ASSERT_TRUE(g.ok());
  ReferenceExecutor exec(nullptr);
  auto out = exec.Run(**g, {at::randn({4})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'w'"), std::string::npos);
}

}  // namespace
}  // namespace torchfuse::frontend
