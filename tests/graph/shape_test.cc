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
  auto bad = ParseTensorType("f32[8,x]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos);
  EXPECT_FALSE(ParseTensorType("q8[1]").ok());
  EXPECT_FALSE(ParseTensorType("f32").ok());
}

}  // namespace
}  // namespace torchfuse::graph
