#include "graph/shape.h"

#include <gtest/gtest.h>

namespace torchfuse::graph {
namespace {

TEST(ShapeTest, BroadcastsTrailingDims) {
  auto r = BroadcastShapes({8, 1, 1024}, {4, 1});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<int64_t>{8, 4, 1024}));
  EXPECT_EQ(*BroadcastShapes({}, {3}), (std::vector<int64_t>{3}));
}

TEST(ShapeTest, RejectsIncompatibleBroadcast) {
  auto r = BroadcastShapes({8, 3}, {4});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[8,3]"), std::string::npos);
}

TEST(ShapeTest, ResolvesReshapeWithMinusOne) {
  EXPECT_EQ(*ResolveReshape({-1, 8}, 64), (std::vector<int64_t>{8, 8}));
  EXPECT_FALSE(ResolveReshape({-1, -1}, 64).ok());
  EXPECT_FALSE(ResolveReshape({5, 5}, 64).ok());
}

TEST(ShapeTest, InfersReductionKeepdim) {
  Graph g;
  Value* x = g.AddInput({DType::kBF16, {8, 128, 768}});
  auto r = g.Append(OpKind::kSum, {x}, {{"dims", std::vector<int64_t>{-1}}, {"keepdim", int64_t{1}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->output()->type().ToString(), "bf16[8,128,1]");
  auto all = g.Append(OpKind::kAmax, {x}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)->output()->type().ToString(), "bf16[]");
}

TEST(ShapeTest, InfersLinearAndMatmul) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {8, 16, 64}});
  Value* w = g.AddInput({DType::kF32, {32, 64}});
  Value* b = g.AddInput({DType::kF32, {32}});
  auto lin = g.Append(OpKind::kLinear, {x, w, b});
  ASSERT_TRUE(lin.ok());
  EXPECT_EQ((*lin)->output()->type().ToString(), "f32[8,16,32]");
  Value* v = g.AddInput({DType::kF32, {64}});
  auto mv = g.Append(OpKind::kMatmul, {x, v});
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ((*mv)->output()->type().ToString(), "f32[8,16]");
  EXPECT_FALSE(g.Append(OpKind::kLinear, {x, b}).ok());
}

TEST(ShapeTest, ComparisonIsBoolAndDivIsFloat) {
  Graph g;
  Value* a = g.AddInput({DType::kI32, {4}});
  Value* b = g.AddInput({DType::kI32, {4}});
  EXPECT_EQ((*g.Append(OpKind::kLt, {a, b}))->output()->type().dtype, DType::kBool);
  EXPECT_EQ((*g.Append(OpKind::kDiv, {a, b}))->output()->type().dtype, DType::kF32);
  EXPECT_EQ((*g.Append(OpKind::kExp, {a}))->output()->type().dtype, DType::kF32);
}

TEST(ShapeTest, ClampKeepsIntegersUnlessABoundIsFloat) {
  Graph g;
  Value* a = g.AddInput({DType::kI32, {4}});
  EXPECT_EQ((*g.Append(OpKind::kClamp, {a}, {{"min", int64_t{0}}}))->output()->type().dtype,
            DType::kI32);
  EXPECT_EQ((*g.Append(OpKind::kClamp, {a}, {{"max", 0.5}}))->output()->type().dtype,
            DType::kF32);
}

TEST(ShapeTest, LayoutOps) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {4, 1, 6}});
  EXPECT_EQ((*g.Append(OpKind::kSqueeze, {x}, {{"dims", std::vector<int64_t>{}}}))
                ->output()->type().ToString(),
            "f32[4,6]");
  EXPECT_EQ((*g.Append(OpKind::kTranspose, {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}))
                ->output()->type().ToString(),
            "f32[6,1,4]");
  EXPECT_EQ((*g.Append(OpKind::kExpand, {x}, {{"shape", std::vector<int64_t>{2, -1, 5, -1}}}))
                ->output()->type().ToString(),
            "f32[2,4,5,6]");
  EXPECT_FALSE(g.Append(OpKind::kExpand, {x}, {{"shape", std::vector<int64_t>{3, 1, 6}}}).ok());
  EXPECT_FALSE(g.Append(OpKind::kPermute, {x}, {{"dims", std::vector<int64_t>{0, 0, 1}}}).ok());
}

TEST(ShapeTest, ParsesTensorSpecs) {
  auto t = ParseTensorType("bf16[8, 4096]");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToString(), "bf16[8,4096]");
  EXPECT_EQ(ParseTensorType("f32[]")->rank(), 0);
  auto bad = ParseTensorType("f32[8,1x]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'1x'"), std::string::npos);
  EXPECT_FALSE(ParseTensorType("f32[8,-2]").ok());
  EXPECT_FALSE(ParseTensorType("q8[1]").ok());
  EXPECT_FALSE(ParseTensorType("f32").ok());
}

TEST(ShapeTest, NamesAndQuestionMarksAreSymbolicDims) {
  auto t = ParseTensorType("bf16[B, T,768]");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ToString(), "bf16[B,T,768]");
  EXPECT_FALSE(t->is_static());
  EXPECT_EQ(t->numel(), -1);
  EXPECT_EQ(t->sizes[0], SymbolicDim("B"));  // one name, one symbol
  EXPECT_NE(t->sizes[0], t->sizes[1]);
  EXPECT_TRUE(IsSymbolic(t->sizes[1]));
  EXPECT_FALSE(IsSymbolic(t->sizes[2]));
  // Each ? is a symbol of its own.
  auto q = ParseTensorType("f32[?,?]");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(IsSymbolic(q->sizes[0]));
  EXPECT_NE(q->sizes[0], q->sizes[1]);
  EXPECT_EQ(ParseTensorType(q->ToString())->sizes, q->sizes);
}

TEST(ShapeTest, SymbolicDimsBroadcastOnlyWithThemselvesAndOne) {
  const int64_t B = SymbolicDim("B"), T = SymbolicDim("T");
  EXPECT_EQ(*BroadcastShapes({B, T}, {T}), (std::vector<int64_t>{B, T}));
  EXPECT_EQ(*BroadcastShapes({B, 1}, {1, T}), (std::vector<int64_t>{B, T}));
  // T may be any size: neither 5 nor another symbol is known to equal it.
  auto five = BroadcastShapes({B, T}, {5});
  ASSERT_FALSE(five.ok());
  EXPECT_NE(five.status().message().find("[B,T]"), std::string::npos) << five.status();
  EXPECT_FALSE(BroadcastShapes({T}, {B}).ok());
}

TEST(ShapeTest, SymbolicReshapesKeepTheElementCountForEverySize) {
  const int64_t B = SymbolicDim("B"), T = SymbolicDim("T");
  // Heads split off a static dim; a -1 may stand for a symbol or for static sizes.
  EXPECT_EQ(*ResolveSymbolicReshape({B, T, 12, 64}, {B, T, 768}),
            (std::vector<int64_t>{B, T, 12, 64}));
  EXPECT_EQ(*ResolveSymbolicReshape({B, -1, 12, 64}, {B, T, 768}),
            (std::vector<int64_t>{B, T, 12, 64}));
  EXPECT_EQ(*ResolveSymbolicReshape({B, T, -1, 64}, {B, T, 768}),
            (std::vector<int64_t>{B, T, 12, 64}));
  EXPECT_EQ(*ResolveSymbolicReshape({2, 3, B, T}, {6, B, T}),
            (std::vector<int64_t>{2, 3, B, T}));
  // Joining symbols (a linear layer's [B*T, 768]) and splitting the product again.
  const int64_t BT = MultiplyDims(B, T);
  EXPECT_EQ(DimName(BT), "B*T");
  EXPECT_EQ(*ResolveSymbolicReshape({-1, 768}, {B, T, 768}), (std::vector<int64_t>{BT, 768}));
  EXPECT_EQ(*ResolveSymbolicReshape({B, T, 2304}, {BT, 2304}),
            (std::vector<int64_t>{B, T, 2304}));
  EXPECT_EQ(*ResolveSymbolicReshape({B, -1, 64}, {BT, 128}),
            (std::vector<int64_t>{B, MultiplyDims(2, T), 64}));
  EXPECT_EQ(*ResolveSymbolicReshape({T, B, 768}, {B, T, 768}), (std::vector<int64_t>{T, B, 768}));
  // Element counts that differ, or a -1 that is not a product of the sizes for every size.
  EXPECT_FALSE(ResolveSymbolicReshape({B, T, 12, 32}, {B, T, 768}).ok());
  EXPECT_FALSE(ResolveSymbolicReshape({B, 6, B}, {B, T, 6}).ok());
  EXPECT_FALSE(ResolveSymbolicReshape({-1, 2, 768}, {T, 768}).ok());  // T / 2
  EXPECT_FALSE(ResolveSymbolicReshape({-1, -1}, {T, 768}).ok());
}

TEST(ShapeTest, ProductsOfSymbolsAreSymbolsWithValuesFromTheirFactors) {
  const int64_t B = SymbolicDim("B"), T = SymbolicDim("T");
  const int64_t t4 = MultiplyDims(4, T);
  EXPECT_TRUE(IsSymbolic(t4));
  EXPECT_EQ(DimName(t4), "4*T");
  EXPECT_EQ(MultiplyDims(T, 4), t4);  // one product, one symbol
  EXPECT_EQ(MultiplyDims(MultiplyDims(T, B), 2), MultiplyDims(2, MultiplyDims(B, T)));
  EXPECT_EQ(MultiplyDims(3, 5), 15);
  EXPECT_EQ(*DivideDims(t4, 4), T);
  EXPECT_EQ(*DivideDims(MultiplyDims(8, T), T), 8);
  EXPECT_FALSE(DivideDims(T, 2).has_value());
  EXPECT_FALSE(DivideDims(B, T).has_value());
  EXPECT_FALSE(DivideDims(t4, 3).has_value());
  EXPECT_EQ(SymbolFactors(MultiplyDims(T, T)), (std::vector<int64_t>{T, T}));
  EXPECT_TRUE(SymbolFactors(12).empty());
  // Specs and printed graphs spell products; parsing one gives the same symbol.
  auto t = ParseTensorType("f32[4*T,B*T,768]");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->sizes, (std::vector<int64_t>{t4, MultiplyDims(B, T), 768}));
  EXPECT_EQ(t->ToString(), "f32[4*T,B*T,768]");
  EXPECT_FALSE(ParseTensorType("f32[4*]").ok());
  EXPECT_FALSE(ParseTensorType("f32[T+1]").ok());
  // A call binds the factors; the product's value follows, and a size that contradicts it
  // does not bind.
  SymbolBinding b;
  ASSERT_TRUE(b.Bind({B, T}, {2, 100}).ok());
  EXPECT_EQ(b.Apply(MultiplyDims(B, T)), 200);
  EXPECT_EQ(b.Apply(t4), 400);
  EXPECT_TRUE(SymbolBinding(b).Bind({t4, 768}, {400, 768}).ok());
  EXPECT_FALSE(SymbolBinding(b).Bind({t4, 768}, {404, 768}).ok());
  // A product bound on its own, before its factors, keeps its value.
  SymbolBinding alone;
  ASSERT_TRUE(alone.Bind({MultiplyDims(B, T), 768}, {64, 768}).ok());
  EXPECT_EQ(alone.Apply(MultiplyDims(B, T)), 64);
  EXPECT_TRUE(IsSymbolic(alone.Apply(B)));
}

TEST(ShapeTest, OpsThatDependOnADynamicSizeAreRefused) {
  Graph g;
  const int64_t T = SymbolicDim("T");
  Value* x = g.AddInput(TensorType{DType::kF32, {4, T}});
  EXPECT_FALSE(g.Append(OpKind::kSqueeze, {x}, {{"dims", std::vector<int64_t>{}}}).ok());
  EXPECT_FALSE(g.Append(OpKind::kSqueeze, {x}, {{"dims", std::vector<int64_t>{1}}}).ok());
  EXPECT_FALSE(g.Append(OpKind::kSlice, {x}, {{"dim", int64_t{1}}, {"start", int64_t{0}},
                                               {"end", int64_t{2}}, {"step", int64_t{1}}})
                   .ok());
  EXPECT_FALSE(g.Append(OpKind::kCat, {x, x}, {{"dim", int64_t{1}}}).ok());
  EXPECT_EQ((*g.Append(OpKind::kCat, {x, x}, {{"dim", int64_t{0}}}))->output()->type().ToString(),
            "f32[8,T]");
  EXPECT_EQ((*g.Append(OpKind::kSum, {x}, {{"dims", std::vector<int64_t>{0}},
                                           {"keepdim", int64_t{1}}}))
                ->output()->type().ToString(),
            "f32[1,T]");
  EXPECT_EQ((*g.Append(OpKind::kTranspose, {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}))
                ->output()->type().ToString(),
            "f32[T,4]");
}

TEST(ShapeTest, BindingGivesSymbolsTheirSizesOfOneCall) {
  const int64_t B = SymbolicDim("B"), T = SymbolicDim("T");
  SymbolBinding b;
  ASSERT_TRUE(b.Bind({B, T, 768}, {8, 1000, 768}).ok());
  ASSERT_TRUE(b.Bind({T, T}, {1000, 1000}).ok());
  EXPECT_EQ(b.Apply(std::vector<int64_t>{B, 12, T}), (std::vector<int64_t>{8, 12, 1000}));
  EXPECT_FALSE(SymbolBinding(b).Bind({T}, {999}).ok());      // T is 1000 in this call
  EXPECT_FALSE(SymbolBinding().Bind({B, 768}, {8, 769}).ok());  // a static size differs
  EXPECT_FALSE(SymbolBinding().Bind({B, 768}, {0, 768}).ok());  // empty: a graph of its own
  EXPECT_FALSE(SymbolBinding().Bind({B}, {8, 1}).ok());
}

}  // namespace
}  // namespace torchfuse::graph
