#include "codegen_nvrtc/elementwise_emitter.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "codegen_nvrtc/nvrtc_compiler.h"
#include "graph/parser.h"

namespace torchfuse::codegen {
namespace {

struct Emitted {
  KernelSource kernel;
  std::unique_ptr<graph::Graph> body;
};

Emitted Emit(const std::string& text, int vec_override = 0, bool index32 = true) {
  auto g = graph::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  auto ix = AnalyzeIndexing(**g);
  EXPECT_TRUE(ix.ok()) << ix.status();
  std::vector<TensorView> views;
  for (const auto& in : (*g)->inputs()) {
    std::vector<int64_t> sizes = in->type().sizes, strides(sizes.size(), 1);
    for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) strides[k] = strides[k + 1] * sizes[k + 1];
    views.push_back({sizes, strides, 0, graph::DTypeSize(in->type().dtype)});
  }
  std::vector<int> out_sizes;
  for (const auto* v : (*g)->outputs()) out_sizes.push_back(graph::DTypeSize(v->type().dtype));
  LaunchLayout l = ComputeLayout(*ix, views, out_sizes, std::vector<uintptr_t>(out_sizes.size(), 0));
  if (vec_override) l.kernel.vec = vec_override;
  l.kernel.index32 = index32;
  auto src = EmitElementwiseKernel(**g, *ix, l.kernel, "test");
  EXPECT_TRUE(src.ok()) << src.status();
  return {*src, std::move(*g)};
}

// Every elementwise op, in one body per dtype.
std::string AllOps(const std::string& dt) {
  return "graph(%x: " + dt + "[32,64], %y: " + dt + "[64]) {\n" +
         "  %c: f64[] = constant() {dtype=\"f64\", value=0.5, wrapped=1}\n"
         "  %a0: " + dt + "[32,64] = add(%x, %y)\n"
         "  %a1: " + dt + "[32,64] = sub(%a0, %c)\n"
         "  %a2: " + dt + "[32,64] = mul(%a1, %x)\n"
         "  %a3: " + dt + "[32,64] = div(%a2, %y)\n"
         "  %a4: " + dt + "[32,64] = pow(%a3, %c)\n"
         "  %a5: " + dt + "[32,64] = maximum(%a4, %x)\n"
         "  %a6: " + dt + "[32,64] = minimum(%a5, %y)\n"
         "  %b0: " + dt + "[32,64] = neg(%a6)\n"
         "  %b1: " + dt + "[32,64] = exp(%b0)\n"
         "  %b2: " + dt + "[32,64] = log(%b1)\n"
         "  %b3: " + dt + "[32,64] = log1p(%b2)\n"
         "  %b4: " + dt + "[32,64] = tanh(%b3)\n"
         "  %b5: " + dt + "[32,64] = sigmoid(%b4)\n"
         "  %b6: " + dt + "[32,64] = relu(%b5)\n"
         "  %b7: " + dt + "[32,64] = gelu(%b6)\n"
         "  %b8: " + dt + "[32,64] = gelu_tanh(%b7)\n"
         "  %b9: " + dt + "[32,64] = silu(%b8)\n"
         "  %c0: " + dt + "[32,64] = sqrt(%b9)\n"
         "  %c1: " + dt + "[32,64] = rsqrt(%c0)\n"
         "  %c2: " + dt + "[32,64] = reciprocal(%c1)\n"
         "  %c3: " + dt + "[32,64] = abs(%c2)\n"
         "  %c4: " + dt + "[32,64] = erf(%c3)\n"
         "  %c5: " + dt + "[32,64] = sin(%c4)\n"
         "  %c6: " + dt + "[32,64] = cos(%c5)\n"
         "  %c7: " + dt + "[32,64] = clamp(%c6) {max=1.0, min=-1.0}\n"
         "  %d0: bool[32,64] = gt(%c7, %x)\n"
         "  %d1: bool[32,64] = logical_not(%d0)\n"
         "  %d2: " + dt + "[32,64] = where(%d1, %c7, %x)\n"
         "  %d3: f32[32,64] = cast(%d2) {dtype=\"f32\"}\n"
         "  %d4: bool[32,64] = le(%d3, %c)\n"
         "  return(%d2, %d4)\n"
         "}\n";
}

TEST(ElementwiseEmitterTest, SameGraphGivesSameBytes) {
  const std::string text = AllOps("f32");
  Emitted a = Emit(text), b = Emit(text);
  EXPECT_EQ(a.kernel.source, b.kernel.source);
  EXPECT_EQ(a.kernel.name, b.kernel.name);
  EXPECT_EQ(a.kernel.name.rfind("tf_test_f32_v4_", 0), 0u) << a.kernel.name;
}

TEST(ElementwiseEmitterTest, DifferentLayoutsGiveDifferentKernels) {
  const std::string text = AllOps("bf16");
  Emitted vec = Emit(text), scalar = Emit(text, /*vec=*/1);
  EXPECT_NE(vec.kernel.name, scalar.kernel.name);
  EXPECT_NE(vec.kernel.source.find("TfVec<tf_bf16, 8>"), std::string::npos);
  EXPECT_EQ(scalar.kernel.source.find("TfVec<tf_bf16"), std::string::npos);
}

TEST(ElementwiseEmitterTest, ComputesHalfTypesInFloatAndSpecializesPow) {
  Emitted e = Emit(R"(graph(%x: f16[8,8]) {
      %three: i64[] = constant() {dtype="i64", value=3, wrapped=1}
      %p: f16[8,8] = pow(%x, %three)
      return(%p)
    })");
  EXPECT_NE(e.kernel.source.find("const float v0 = tf_cvt<float>(s0);"), std::string::npos)
      << e.kernel.source;
  EXPECT_NE(e.kernel.source.find("(v0 * v0 * v0)"), std::string::npos) << e.kernel.source;
}

// f16/bf16 values are computed in f32 and rounded where stored; a comparison's operands are
// computed as eager computes them, every f16/bf16 value of their cone rounded to its type, so
// that a value read back from memory and the same value computed afresh compare equal. f32
// comparisons, and values that feed no comparison, are left alone.
TEST(ElementwiseEmitterTest, ComparisonOperandsAreComputedWithEagersRounding) {
  for (const std::string dt : {"f16", "bf16", "f32"}) {
    Emitted e = Emit("graph(%x: " + dt + "[8,8], %y: " + dt + "[8,8]) {\n"
                     "  %c: f64[] = constant() {dtype=\"f64\", value=1.5, wrapped=1}\n"
                     "  %a: " + dt + "[8,8] = abs(%x)\n"
                     "  %p: " + dt + "[8,8] = pow(%a, %c)\n"
                     "  %g: bool[8,8] = gt(%p, %y)\n"
                     "  %s: " + dt + "[8,8] = mul(%a, %y)\n"
                     "  return(%g, %s)\n"
                     "}");
    const std::string& src = e.kernel.source;
    if (dt == "f32") {
      EXPECT_EQ(src.find("tf_cvt<float>(tf_cvt<tf_"), std::string::npos) << src;
      continue;
    }
    const std::string storage = dt == "f16" ? "tf_half" : "tf_bf16";
    const std::string rounded = "tf_cvt<float>(tf_cvt<" + storage + ">(";
    EXPECT_NE(src.find(rounded + "tf_abs("), std::string::npos) << src;
    EXPECT_NE(src.find(rounded + "tf_pow("), std::string::npos) << src;
    // The product, which no comparison reads, uses abs unrounded.
    EXPECT_NE(src.find("= tf_abs("), std::string::npos) << src;
  }
}

TEST(ElementwiseEmitterTest, PerLaneLoadsTestEachLanesIndexAgainstTheirGuards) {
  // Rows of 8 rotated by 3: the boundary at 5 splits the second vector of each row.
  for (const std::string dt : {"f32", "bf16"}) {
    Emitted e = Emit("graph(%x: " + dt + "[64,8]) {\n"
                     "  %a: " + dt + "[64,3] = slice(%x) {dim=1, start=0, end=3, step=1}\n"
                     "  %b: " + dt + "[64,5] = slice(%x) {dim=1, start=3, end=8, step=1}\n"
                     "  %c: " + dt + "[64,8] = cat(%b, %a) {dim=1}\n"
                     "  return(%c)\n}");
    const std::string& src = e.kernel.source;
    const std::string width = dt == "f32" ? "4" : "8";
    EXPECT_NE(e.kernel.name.find("_v" + width + "_"), std::string::npos) << e.kernel.name;
    // Each lane loads under its own index's guard; the stores are whole vectors.
    EXPECT_NE(src.find("((d1 + e) >= 0 && (d1 + e) < 5)"), std::string::npos) << src;
    EXPECT_NE(src.find("((d1 + e) >= 5 && (d1 + e) < 8)"), std::string::npos) << src;
    EXPECT_NE(src.find("*reinterpret_cast<TfVec<"), std::string::npos) << src;
    auto image = CompileCuda(e.kernel.source, e.kernel.name, 90);
    ASSERT_TRUE(image.ok()) << image.status();
  }
}

// Emits `text` with input `transposed` viewed transposed (its last two dims swapped in memory).
Emitted EmitTransposed(const std::string& text, int transposed, int block_size = 256,
                       bool index32 = true) {
  auto g = graph::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  auto ix = AnalyzeIndexing(**g);
  EXPECT_TRUE(ix.ok()) << ix.status();
  std::vector<TensorView> views;
  for (int n = 0; n < (*g)->num_inputs(); ++n) {
    const auto& sizes = (*g)->input(n)->type().sizes;
    std::vector<int64_t> order(sizes.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int64_t>(k);
    if (n == transposed) std::swap(order[order.size() - 1], order[order.size() - 2]);
    std::vector<int64_t> strides(sizes.size(), 1);
    int64_t step = 1;
    for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) {
      strides[order[k]] = step;
      step *= sizes[order[k]];
    }
    views.push_back({sizes, strides, 0, graph::DTypeSize((*g)->input(n)->type().dtype)});
  }
  std::vector<int> out_sizes;
  for (const auto* v : (*g)->outputs()) out_sizes.push_back(graph::DTypeSize(v->type().dtype));
  LaunchLayout l = ComputeLayout(*ix, views, out_sizes, std::vector<uintptr_t>(out_sizes.size(), 0));
  l.kernel.index32 = index32;
  auto src = EmitElementwiseKernel(**g, *ix, l.kernel, "test", block_size);
  EXPECT_TRUE(src.ok()) << src.status();
  return {*src, std::move(*g)};
}

TEST(ElementwiseEmitterTest, ATransposedOperandIsReadThroughASharedTile) {
  for (const std::string dt : {"f32", "bf16", "f64"}) {
    for (int block : {128, 256, 512}) {
      // y + x where x is transposed in memory; the cat guards the tiled loads of x.
      Emitted e = EmitTransposed("graph(%y: " + dt + "[3,40,70], %x: " + dt + "[3,40,70]) {\n"
                                 "  %a: " + dt + "[3,40,30] = slice(%x) {dim=2, start=0, end=30, step=1}\n"
                                 "  %b: " + dt + "[3,40,40] = slice(%x) {dim=2, start=30, end=70, step=1}\n"
                                 "  %c: " + dt + "[3,40,70] = cat(%b, %a) {dim=2}\n"
                                 "  %z: " + dt + "[3,40,70] = add(%y, %c)\n"
                                 "  return(%z)\n}",
                                 1, block);
      const std::string& src = e.kernel.source;
      // Guarded: one element per lane.
      EXPECT_NE(src.find("layout r3_v1_u1_i32_o2_t1.1_"), std::string::npos) << src;
      EXPECT_NE(src.find("__shared__"), std::string::npos) << src;
      // Loaded along the tile dim (lanes tx on d1), used along the innermost (lanes on d2).
      EXPECT_NE(src.find("const int d1 = tt * 32 + tx;"), std::string::npos) << src;
      EXPECT_NE(src.find("[tx][y]"), std::string::npos) << src;
      EXPECT_NE(src.find(absl::StrCat("y += ", block / 32, ")")), std::string::npos) << src;
      // The cat's guards hold on the tiled loads.
      EXPECT_NE(src.find("(d2 >= 0 && d2 < 40)"), std::string::npos) << src;
      EXPECT_NE(src.find("__syncthreads();"), std::string::npos) << src;
      auto image = CompileCuda(e.kernel.source, e.kernel.name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << src;
    }
  }
}

TEST(ElementwiseEmitterTest, TileRowsMoveAsVectors) {
  for (const auto& [dt, width] : {std::pair<std::string, int>{"f32", 4}, {"bf16", 8}, {"f64", 2}}) {
    for (int block : {128, 256, 512}) {
      // y * x.t() + b, b broadcast along rows: x's rows in vectors through the tile, y's and the
      // output's in vectors, b one element per vector.
      Emitted e = EmitTransposed("graph(%y: " + dt + "[64,96], %x: " + dt + "[64,96], %b: " + dt + "[64,1]) {\n"
                                 "  %m: " + dt + "[64,96] = mul(%y, %x)\n"
                                 "  %z: " + dt + "[64,96] = add(%m, %b)\n"
                                 "  return(%z)\n}",
                                 1, block);
      const std::string& src = e.kernel.source;
      const std::string t = dt == "f32" ? "float" : dt == "f64" ? "double" : "tf_bf16";
      const std::string vt = absl::StrCat("TfVec<", t, ", ", width, ">");
      EXPECT_NE(src.find(absl::StrCat("_t0.", width, "_LTB")), std::string::npos) << src;
      EXPECT_NE(src.find(absl::StrCat("const ", vt, " v1 = *reinterpret_cast<const ", vt, "*>(in1")),
                std::string::npos) << src;
      EXPECT_NE(src.find(absl::StrCat("*reinterpret_cast<", vt, "*>(out0 + i) = r0;")),
                std::string::npos) << src;
      EXPECT_NE(src.find(absl::StrCat("tile1[tx * ", width, " + e][y]")), std::string::npos) << src;
      auto image = CompileCuda(e.kernel.source, e.kernel.name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << src;
    }
    // 64-bit indexing (tensors past 2^30 elements) compiles too.
    Emitted wide = EmitTransposed("graph(%y: " + dt + "[64,96], %x: " + dt + "[64,96]) {\n"
                                  "  %z: " + dt + "[64,96] = sub(%y, %x)\n"
                                  "  return(%z)\n}",
                                  1, 128, /*index32=*/false);
    EXPECT_NE(wide.kernel.source.find("const long long ntiles"), std::string::npos) << wide.kernel.source;
    auto image = CompileCuda(wide.kernel.source, wide.kernel.name, 90);
    ASSERT_TRUE(image.ok()) << image.status() << wide.kernel.source;
  }
}

class ElementwiseCompileTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// NVRTC compiles what the emitter writes, for every dtype, on sm_80 and sm_90.
TEST_P(ElementwiseCompileTest, NvrtcCompilesEveryOpAndLayout) {
  const auto& [dtype, arch] = GetParam();
  for (int vec : {0, 1}) {
    for (bool index32 : {true, false}) {
      Emitted e = Emit(AllOps(dtype), vec, index32);
      auto image = CompileCuda(e.kernel.source, e.kernel.name, arch);
      ASSERT_TRUE(image.ok()) << image.status();
      EXPECT_FALSE(image->is_ptx);
      EXPECT_EQ(image->arch, arch);
      EXPECT_GT(image->data.size(), 1000u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndArchs, ElementwiseCompileTest,
                         ::testing::Combine(::testing::Values("f32", "f16", "bf16", "f64"),
                                            ::testing::Values(80, 90)));

}  // namespace
}  // namespace torchfuse::codegen
