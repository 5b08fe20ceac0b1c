#include "runtime/conv_runner.h"

#include <gtest/gtest.h>
#include <c10/core/GradMode.h>
#include <torch/cuda.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen_nvrtc/conv_kernel.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "graph/graph.h"

namespace torchfuse::runtime {
namespace {

using codegen::DepthwiseConvSpec;

// A graph of one convolution node as the import makes it: operands input, weight[, bias], the
// geometry {sh, sw, ph, pw, dh, dw, groups} in attribute "conv2d".
struct ConvGraph {
  graph::Graph g;
  graph::Node* node = nullptr;
  ConvGraph(const std::string& x, const std::string& w, const std::string& b,
            std::vector<int64_t> geometry, const std::string& out) {
    std::vector<graph::Value*> in = {g.AddInput(*graph::ParseTensorType(x)),
                                     g.AddInput(*graph::ParseTensorType(w))};
    if (!b.empty()) in.push_back(g.AddInput(*graph::ParseTensorType(b)));
    graph::Attrs attrs;
    attrs["target"] = std::string("aten::convolution");
    attrs["handle"] = int64_t{0};
    attrs["conv2d"] = std::move(geometry);
    attrs["conv_bias"] = int64_t{b.empty() ? 0 : 1};
    node = g.AppendNode(graph::OpKind::kOpaque, in, std::move(attrs),
                        {*graph::ParseTensorType(out)});
  }
};

TEST(DepthwiseConvKernelTest, NvrtcCompilesEveryDTypeFilterStrideAndTile) {
  std::set<std::string> names;
  for (graph::DType dtype : {graph::DType::kF32, graph::DType::kF16, graph::DType::kBF16}) {
    for (auto [k, s, d] : {std::tuple{7, 1, 1}, std::tuple{3, 2, 1}, std::tuple{3, 1, 2},
                           std::tuple{5, 1, 1}}) {
      for (auto [c, nchw] : {std::pair{96, false}, std::pair{40, false}, std::pair{3, false},
                             std::pair{96, true}}) {
        DepthwiseConvSpec spec;
        spec.nchw = nchw;
        spec.dtype = dtype;
        spec.kh = spec.kw = k;
        spec.sh = spec.sw = s;
        spec.dh = spec.dw = d;
        spec.bias = c != 40;
        spec = codegen::DepthwiseConvTile(spec, c, /*align=*/256);
        auto kernel = codegen::EmitDepthwiseConvKernel(spec);
        ASSERT_TRUE(kernel.ok()) << kernel.status();
        names.insert(kernel->name);
        auto image = codegen::CompileCuda(kernel->source, kernel->name, 90);
        ASSERT_TRUE(image.ok()) << image.status() << "\n" << kernel->source;
      }
    }
  }
  // Specs that differ name different kernels.
  EXPECT_GE(names.size(), 24u);
}

// The tile DepthwiseConvTile picks for `c` channels of `spec` aligned to `align` bytes, as
// (vec, cb, th, tw).
std::tuple<int, int, int, int> TileOf(const DepthwiseConvSpec& spec, int64_t c, int align) {
  const DepthwiseConvSpec t = codegen::DepthwiseConvTile(spec, c, align);
  return {t.vec, t.cb, t.th, t.tw};
}

TEST(DepthwiseConvKernelTest, TileTakesChannelPairsWhereTheyDivideAndAlign) {
  using Tile = std::tuple<int, int, int, int>;  // vec, cb, th, tw
  DepthwiseConvSpec bf16;
  bf16.dtype = graph::DType::kBF16;
  // 96 bf16 channels: pairs (48 vectors), 16 of them a block (48 = 3 x 16); 4 x 4 outputs.
  EXPECT_EQ(TileOf(bf16, 96, 256), Tile(2, 16, 4, 4));
  // 768: 384 pairs, 32 a block.
  EXPECT_EQ(TileOf(bf16, 768, 256), Tile(2, 32, 4, 4));
  // An odd channel count, or pointers aligned to 2 bytes only: one channel a thread.
  EXPECT_EQ(TileOf(bf16, 3, 256), Tile(1, 1, 4, 4));
  EXPECT_EQ(TileOf(bf16, 96, 2), Tile(1, 32, 4, 4));
  // A 7 x 7 filter too.
  DepthwiseConvSpec wide = bf16;
  wide.kh = wide.kw = 7;
  EXPECT_EQ(TileOf(wide, 96, 256), Tile(2, 16, 4, 4));
  // f32 pairs need 8-byte alignment: 48 pairs, 16 a block; one channel where 4 bytes only.
  DepthwiseConvSpec f32;
  EXPECT_EQ(TileOf(f32, 96, 256), Tile(2, 16, 4, 4));
  EXPECT_EQ(TileOf(f32, 96, 4), Tile(1, 32, 4, 4));
  EXPECT_EQ(TileOf(f32, 97, 256), Tile(1, 1, 4, 4));
  // A strided convolution: 2 x 4 outputs a thread.
  DepthwiseConvSpec strided = f32;
  strided.sh = strided.sw = 2;
  EXPECT_EQ(TileOf(strided, 96, 256), Tile(2, 16, 2, 4));
  // NCHW: one channel a thread, 7 x 2 outputs (2 x 2 strided), whatever the alignment.
  DepthwiseConvSpec planes = f32;
  planes.nchw = true;
  EXPECT_EQ(TileOf(planes, 96, 256), Tile(1, 1, 7, 2));
  EXPECT_EQ(TileOf(planes, 96, 4), Tile(1, 1, 7, 2));
  planes.sh = 2;
  EXPECT_EQ(TileOf(planes, 96, 256), Tile(1, 1, 2, 2));
  // The kernel's source holds no sizes of a call: one binary for every batch and image size.
  auto k = codegen::EmitDepthwiseConvKernel(codegen::DepthwiseConvTile(bf16, 96, 256));
  ASSERT_TRUE(k.ok());
  const std::string own = k->source.substr(codegen::DevicePrelude().size());
  for (const char* size : {"56", "224", "96"}) {
    EXPECT_EQ(own.find(size), std::string::npos) << size;
  }
  EXPECT_FALSE(codegen::EmitDepthwiseConvKernel([] {
                 DepthwiseConvSpec s;
                 s.dtype = graph::DType::kF64;
                 return s;
               }()).ok());
}

// The layout compiled ahead is the one torchfuse's inference graphs give the dtype: NCHW in
// f32, channels-last in 16 bits; the spec says so.
TEST(ConvRunnerTest, ExpectsNchwInF32AndChannelsLastIn16Bits) {
  const std::vector<int64_t> dw = {1, 1, 3, 3, 1, 1, 96};
  ConvGraph f32("f32[2,96,9,9]", "f32[96,1,7,7]", "", dw, "f32[2,96,9,9]");
  ConvGraph bf16("bf16[2,96,9,9]", "bf16[96,1,7,7]", "", dw, "bf16[2,96,9,9]");
  EXPECT_TRUE(ConvRunner::ExpectsNchw(*f32.node));
  EXPECT_FALSE(ConvRunner::ExpectsNchw(*bf16.node));
  EXPECT_TRUE(ConvRunner::SpecOf(*f32.node, true)->nchw);
  EXPECT_FALSE(ConvRunner::SpecOf(*bf16.node, false)->nchw);
}

TEST(ConvRunnerTest, TakesDepthwiseConvolutionsOnly) {
  const std::vector<int64_t> dw = {1, 1, 3, 3, 1, 1, 96};
  EXPECT_TRUE(ConvRunner::Takes(
      *ConvGraph("bf16[N,96,56,56]", "bf16[96,1,7,7]", "bf16[96]", dw, "bf16[N,96,56,56]").node));
  EXPECT_TRUE(ConvRunner::Takes(
      *ConvGraph("f32[2,96,9,9]", "f32[96,1,7,7]", "", dw, "f32[2,96,9,9]").node));
  // groups == 1 (an ordinary convolution), a channel multiplier of 2, another dtype, mixed
  // dtypes, a 12 x 12 filter.
  EXPECT_FALSE(ConvRunner::Takes(*ConvGraph("f32[2,96,9,9]", "f32[96,96,3,3]", "",
                                            {1, 1, 1, 1, 1, 1, 1}, "f32[2,96,9,9]")
                                      .node));
  EXPECT_FALSE(ConvRunner::Takes(*ConvGraph("f32[2,48,9,9]", "f32[96,1,3,3]", "",
                                            {1, 1, 1, 1, 1, 1, 48}, "f32[2,96,9,9]")
                                      .node));
  EXPECT_FALSE(ConvRunner::Takes(
      *ConvGraph("f64[2,96,9,9]", "f64[96,1,7,7]", "", dw, "f64[2,96,9,9]").node));
  EXPECT_FALSE(ConvRunner::Takes(
      *ConvGraph("bf16[2,96,9,9]", "f32[96,1,7,7]", "", dw, "bf16[2,96,9,9]").node));
  EXPECT_FALSE(ConvRunner::Takes(*ConvGraph("f32[2,96,20,20]", "f32[96,1,12,12]", "",
                                            {1, 1, 0, 0, 1, 1, 96}, "f32[2,96,9,9]")
                                      .node));
  // The channels as a symbol.
  EXPECT_FALSE(ConvRunner::Takes(
      *ConvGraph("f32[2,C,9,9]", "f32[96,1,7,7]", "", dw, "f32[2,96,9,9]").node));
}

// The sizes alone (what the Python package asks before the graph is imported): each limit of
// the kernel, on the boundary and one past it.
TEST(ConvRunnerTest, TakesSizesHoldsTheKernelsLimits) {
  using graph::DType;
  auto takes = [](DType t, int64_t c, std::vector<int64_t> w, std::vector<int64_t> g) {
    return ConvRunner::TakesSizes(t, c, w, g);
  };
  const std::vector<int64_t> w7 = {96, 1, 7, 7};
  EXPECT_TRUE(takes(DType::kBF16, 96, w7, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_TRUE(takes(DType::kF16, 96, w7, {8, 8, 0, 0, 8, 8, 96}));
  EXPECT_TRUE(takes(DType::kF32, 96, {96, 1, 11, 1}, {2, 1, 5, 0, 1, 2, 96}));
  EXPECT_FALSE(takes(DType::kF64, 96, w7, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kI64, 96, w7, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 48, w7, {1, 1, 3, 3, 1, 1, 96}));   // channels != groups
  EXPECT_FALSE(takes(DType::kBF16, 96, {48, 1, 7, 7}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, {96, 2, 7, 7}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, {96, 1, 12, 7}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, {96, 1, 7, 12}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, {96, 1, 0, 7}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {9, 1, 3, 3, 1, 1, 96}));   // stride
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {1, 0, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {1, 1, -1, 3, 1, 1, 96}));  // padding
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {1, 1, 3, 3, 9, 1, 96}));   // dilation
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {1, 1, 3, 3, 1, 0, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, {96, 1, 7}, {1, 1, 3, 3, 1, 1, 96}));
  EXPECT_FALSE(takes(DType::kBF16, 96, w7, {1, 1, 3, 3, 1, 96}));
}

// Operands the kernel cannot take (here on the CPU) are left to torch: nullopt, on every call
// (the reason's warning is given once), and nothing launches.
TEST(ConvRunnerTest, LeavesCpuOperandsToTorch) {
  ConvGraph graph("f32[2,8,6,6]", "f32[8,1,3,3]", "f32[8]", {1, 1, 1, 1, 1, 1, 8},
                  "f32[2,8,6,6]");
  ConvRunner runner(RunnerEnv{});
  const std::vector<at::Tensor> operands = {
      at::randn({2, 8, 6, 6}).contiguous(at::MemoryFormat::ChannelsLast), at::randn({8, 1, 3, 3}),
      at::randn({8})};
  for (int call = 0; call < 2; ++call) {
    auto r = runner.Run(*graph.node, operands);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->has_value());
  }
}

class ConvRunnerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

const char* Name(at::ScalarType t) {
  return t == at::kFloat ? "f32" : t == at::kHalf ? "f16" : "bf16";
}

// Against torch's convolution in f64 on the same (rounded) operands, over dtypes, filters,
// strides, dilations, paddings, channel counts (pairs, odd, fewer than a warp), batch and
// image sizes that no tile divides, with and without a bias.
TEST_F(ConvRunnerGpuTest, MatchesTorchInF64OverShapesAndDTypes) {
  struct Case {
    int64_t n, c, h, w, k, stride, pad, dil;
    bool bias;
  };
  const std::vector<Case> cases = {
      {2, 96, 13, 11, 7, 1, 3, 1, true},  {1, 40, 9, 17, 3, 2, 1, 1, false},
      {3, 3, 8, 8, 3, 1, 2, 2, true},     {2, 64, 7, 7, 7, 1, 3, 1, true},
      {1, 32, 6, 10, 5, 2, 0, 1, false},  {2, 17, 5, 4, 3, 1, 1, 1, true},
      {1, 128, 4, 4, 7, 1, 3, 1, false},  {2, 24, 15, 15, 3, 3, 1, 1, true}};
  for (bool nchw : {false, true}) {
    for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
      for (const Case& k : cases) {
        SCOPED_TRACE(::testing::Message()
                     << (nchw ? "NCHW " : "NHWC ") << Name(dt) << " n" << k.n << " c" << k.c << " "
                     << k.h << "x" << k.w << " k" << k.k << " s" << k.stride << " p" << k.pad
                     << " d" << k.dil << (k.bias ? " bias" : ""));
        const int64_t oh = (k.h + 2 * k.pad - k.dil * (k.k - 1) - 1) / k.stride + 1;
        const int64_t ow = (k.w + 2 * k.pad - k.dil * (k.k - 1) - 1) / k.stride + 1;
        const std::string t = Name(dt);
        ConvGraph graph(absl::StrCat(t, "[", k.n, ",", k.c, ",", k.h, ",", k.w, "]"),
                        absl::StrCat(t, "[", k.c, ",1,", k.k, ",", k.k, "]"),
                        k.bias ? absl::StrCat(t, "[", k.c, "]") : "",
                        {k.stride, k.stride, k.pad, k.pad, k.dil, k.dil, k.c},
                        absl::StrCat(t, "[", k.n, ",", k.c, ",", oh, ",", ow, "]"));
        ASSERT_TRUE(ConvRunner::Takes(*graph.node));
        const auto cuda = at::TensorOptions().device(at::kCUDA);
        at::Tensor x =
            at::randn({k.n, k.c, k.h, k.w}, cuda)
                .to(dt)
                .contiguous(nchw ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast);
        at::Tensor w = at::randn({k.c, 1, k.k, k.k}, cuda).to(dt);
        at::Tensor b = k.bias ? at::randn({k.c}, cuda).to(dt) : at::Tensor();
        std::vector<at::Tensor> operands = {x, w};
        if (k.bias) operands.push_back(b);
        ConvRunner runner(RunnerEnv{});
        auto got = runner.Run(*graph.node, operands);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_TRUE(got->has_value());
        const at::Tensor want = at::conv2d(
            x.to(at::kDouble), w.to(at::kDouble), k.bias ? b.to(at::kDouble) : at::Tensor(),
            {k.stride, k.stride}, {k.pad, k.pad}, {k.dil, k.dil}, k.c);
        const at::Tensor& out = **got;
        ASSERT_EQ(out.sizes(), want.sizes());
        EXPECT_EQ(out.scalar_type(), dt);
        EXPECT_TRUE(out.is_contiguous(nchw ? at::MemoryFormat::Contiguous
                                           : at::MemoryFormat::ChannelsLast));
        const double err = ((out.to(at::kDouble) - want).norm() / want.norm()).item<double>();
        EXPECT_LE(err, dt == at::kFloat ? 1e-6 : dt == at::kHalf ? 1e-3 : 8e-3);
        // Element by element too: no output left unwritten or written twice.
        const double worst = (out.to(at::kDouble) - want).abs().max().item<double>();
        EXPECT_LE(worst, (dt == at::kFloat ? 1e-4 : 0.1) * want.abs().max().item<double>() + 1e-5);
      }
    }
  }
}

// Operands the kernel does not take come back as nullopt (torch runs the node): an input
// neither channels-last nor contiguous, a weight that requires grad under grad mode. An input
// at an odd offset in bf16 or f32 runs (pairs then unaligned: one channel a thread) and is
// right.
TEST_F(ConvRunnerGpuTest, LeavesOtherLayoutsAndGradToTorch) {
  ConvGraph graph("bf16[2,32,8,8]", "bf16[32,1,3,3]", "bf16[32]", {1, 1, 1, 1, 1, 1, 32},
                  "bf16[2,32,8,8]");
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  at::Tensor w = at::randn({32, 1, 3, 3}, cuda), b = at::randn({32}, cuda);
  ConvRunner runner(RunnerEnv{});
  // Neither channels-last nor contiguous: H and W swapped.
  at::Tensor swapped = at::randn({2, 32, 8, 8}, cuda).transpose(2, 3);
  auto r = runner.Run(*graph.node, {swapped, w, b});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  // Channels-last storage at an odd element offset.
  at::Tensor storage = at::randn({2 * 8 * 8 * 32 + 1}, cuda);
  at::Tensor odd = storage.narrow(0, 1, 2 * 8 * 8 * 32)
                       .view({2, 8, 8, 32})
                       .permute({0, 3, 1, 2});
  ASSERT_TRUE(odd.is_contiguous(at::MemoryFormat::ChannelsLast));
  r = runner.Run(*graph.node, {odd, w, b});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  const at::Tensor want = at::conv2d(odd.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble),
                                     {1, 1}, {1, 1}, {1, 1}, 32);
  EXPECT_LE(((r->value().to(at::kDouble) - want).norm() / want.norm()).item<double>(), 8e-3);
  // f32 at an odd offset: 4-byte aligned, so one channel a thread instead of float2 pairs.
  {
    ConvGraph f32("f32[2,32,8,8]", "f32[32,1,3,3]", "f32[32]", {1, 1, 1, 1, 1, 1, 32},
                  "f32[2,32,8,8]");
    const auto opts = at::TensorOptions().device(at::kCUDA);
    at::Tensor wf = at::randn({32, 1, 3, 3}, opts), bf = at::randn({32}, opts);
    at::Tensor odd_f32 = at::randn({2 * 8 * 8 * 32 + 1}, opts)
                             .narrow(0, 1, 2 * 8 * 8 * 32)
                             .view({2, 8, 8, 32})
                             .permute({0, 3, 1, 2});
    ConvRunner f32_runner(RunnerEnv{});
    auto got = f32_runner.Run(*f32.node, {odd_f32, wf, bf});
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    const at::Tensor want_f32 = at::conv2d(odd_f32.to(at::kDouble), wf.to(at::kDouble),
                                           bf.to(at::kDouble), {1, 1}, {1, 1}, {1, 1}, 32);
    EXPECT_LE(((got->value().to(at::kDouble) - want_f32).norm() / want_f32.norm())
                  .item<double>(),
              1e-6);
  }
  at::Tensor grad_w = w.detach().clone().requires_grad_(true);
  at::Tensor x = at::randn({2, 32, 8, 8}, cuda).contiguous(at::MemoryFormat::ChannelsLast);
  {
    c10::AutoGradMode on(true);
    r = runner.Run(*graph.node, {x, grad_w, b});
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->has_value());
  }
  {
    c10::AutoGradMode off(false);
    r = runner.Run(*graph.node, {x, grad_w, b});
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->has_value());
  }
}

}  // namespace
}  // namespace torchfuse::runtime
