#include "graph/graph.h"

#include <gtest/gtest.h>

#include "graph/verifier.h"

namespace torchfuse::graph {
namespace {

TEST(GraphTest, TracksUsesAndReplaces) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {4}});
  Node* e = *g.Append(OpKind::kExp, {x});
  Node* m = *g.Append(OpKind::kMul, {e->output(), e->output()});
  g.AddOutput(m->output());
  EXPECT_EQ(e->output()->uses().size(), 2u);
  Node* t = *g.Append(OpKind::kTanh, {x});
  g.ReplaceAllUsesWith(e->output(), t->output());
  EXPECT_TRUE(e->output()->uses().empty());
  EXPECT_EQ(t->output()->uses().size(), 2u);
  EXPECT_TRUE(g.IsOutput(m->output()));
  EXPECT_FALSE(g.IsOutput(t->output()));
  EXPECT_FALSE(g.IsOutput(x));
  // The tanh was appended after the mul; the verifier must now flag use-before-definition.
  EXPECT_FALSE(VerifyGraph(g).ok());
}

TEST(GraphTest, RemovesDeadNodesButKeepsOpaque) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {4}});
  *g.Append(OpKind::kExp, {x});
  g.AppendNode(OpKind::kOpaque, {x}, {{"target", std::string("aten::foo")}}, {x->type()});
  Node* live = *g.Append(OpKind::kNeg, {x});
  g.AddOutput(live->output());
  EXPECT_EQ(g.RemoveDeadNodes(), 1);
  EXPECT_EQ(g.nodes().size(), 2u);
}

// What an interpreter may drop after each node: inputs at their last reader (once, where read
// twice), outputs no node reads at their maker, never a graph output.
TEST(GraphTest, DeadAfterEachNode) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {4}});
  Value* unread = g.AddInput({DType::kF32, {4}});
  Node* e = *g.Append(OpKind::kExp, {x});                          // 0
  Node* m = *g.Append(OpKind::kMul, {e->output(), e->output()});   // 1
  Node* t = *g.Append(OpKind::kTanh, {x});                         // 2: unread, x's last read
  Node* n = *g.Append(OpKind::kNeg, {m->output()});                // 3
  g.AddOutput(n->output());
  g.AddOutput(m->output());
  (void)unread;
  const std::vector<std::vector<const Value*>> dead = DeadAfter(g);
  ASSERT_EQ(dead.size(), 4u);
  EXPECT_TRUE(dead[0].empty());
  EXPECT_EQ(dead[1], (std::vector<const Value*>{e->output()}));
  EXPECT_EQ(dead[2], (std::vector<const Value*>{x, t->output()}));
  EXPECT_TRUE(dead[3].empty());  // the mul's output is a graph output
}

TEST(GraphTest, AppendReportsOpAndTypes) {
  Graph g;
  Value* a = g.AddInput({DType::kF32, {8, 3}});
  Value* b = g.AddInput({DType::kF32, {4}});
  auto r = g.Append(OpKind::kAdd, {a, b});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("add(f32[8,3], f32[4])"), std::string::npos);
}

TEST(GraphTest, ConstantsCarryDtypeAndWrappedFlag) {
  Graph g;
  Node* c = g.AppendConstant(0.5, DType::kF64, true);
  EXPECT_EQ(c->output()->type().ToString(), "f64[]");
  EXPECT_EQ(c->IntAttr("wrapped"), 1);
  EXPECT_DOUBLE_EQ(c->NumberAttr("value"), 0.5);
  Node* i = g.AppendConstant(3, DType::kI64, false);
  EXPECT_EQ(i->IntAttr("value"), 3);
  EXPECT_FALSE(i->HasAttr("wrapped"));
}

TEST(GraphTest, OpTableIsConsistent) {
  for (int i = 0; i < NumOpKinds(); ++i) {
    OpKind k = static_cast<OpKind>(i);
    auto back = OpKindFromName(OpName(k));
    ASSERT_TRUE(back.has_value()) << OpName(k);
    EXPECT_EQ(*back, k);
    // Exactly the elementwise ops have a CUDA expression.
    EXPECT_EQ(IsElementwise(k), std::string(OpCudaExpr(k)).size() > 0) << OpName(k);
  }
}

}  // namespace
}  // namespace torchfuse::graph
