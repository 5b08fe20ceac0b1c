#include "fusion/move_reshapes.h"

#include <gtest/gtest.h>

#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using graph::OpKind;

std::unique_ptr<graph::Graph> Parse(const char* text) {
  auto g = graph::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

int Groups(const graph::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->kind() == OpKind::kFusionGroup;
  return n;
}

// The cross-entropy of a language model: logits cast to f32, viewed as rows, log_softmax.
constexpr char kLossHead[] = R"(graph(%x: bf16[8,16,50]) {
    %f: f32[8,16,50] = cast(%x) {dtype="f32"}
    %v: f32[128,50] = reshape(%f) {shape=[128,50]}
    %y: f32[128,50] = log_softmax(%v) {dim=-1}
    return(%y)
  })";

TEST(MoveReshapesTest, ACastBeforeAViewMovesAfterItAndJoinsTheRowKernel) {
  auto g = Parse(kLossHead);
  auto changed = MoveReshapes(g.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(graph::VerifyGraph(*g).ok()) << graph::PrintGraph(*g);
  // The reshape now reads the graph input; the cast reads the reshape.
  const graph::Node* first = g->nodes().front().get();
  EXPECT_EQ(first->kind(), OpKind::kReshape) << graph::PrintGraph(*g);
  EXPECT_EQ(first->output()->type().dtype, graph::DType::kBF16);
  auto full = Parse(kLossHead);
  ASSERT_TRUE(RunFusionPipeline(full.get()).ok());
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
}

TEST(MoveReshapesTest, ACastAfterAViewOfAKernelsResultMovesBeforeIt) {
  // A row kernel's f32 result, viewed back to [8, 16, 50], cast to bf16 for a matmul.
  auto g = Parse(R"(graph(%x: f32[128,50], %w: bf16[50,4]) {
      %y: f32[128,50] = softmax(%x) {dim=-1}
      %v: f32[8,16,50] = reshape(%y) {shape=[8,16,50]}
      %h: bf16[8,16,50] = cast(%v) {dtype="bf16"}
      %m: bf16[8,16,4] = matmul(%h, %w)
      return(%m)
    })");
  ASSERT_TRUE(RunFusionPipeline(g.get()).ok());
  EXPECT_EQ(Groups(*g), 1) << graph::PrintGraph(*g);
  for (const auto& n : g->nodes()) {
    if (n->kind() == OpKind::kFusionGroup) {
      EXPECT_EQ(n->output()->type().dtype, graph::DType::kBF16) << graph::PrintGraph(*g);
    }
  }
}

TEST(MoveReshapesTest, ValuesUsedTwiceAndGraphOutputsStay) {
  auto g = Parse(R"(graph(%x: bf16[8,16,50]) {
      %f: f32[8,16,50] = cast(%x) {dtype="f32"}
      %v: f32[128,50] = reshape(%f) {shape=[128,50]}
      %y: f32[128,50] = log_softmax(%v) {dim=-1}
      return(%y, %f)
    })");
  auto changed = MoveReshapes(g.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  // A reshape that only drops a size-1 dim is an index map already: left alone.
  auto h = Parse(R"(graph(%x: bf16[8,1,50]) {
      %f: f32[8,1,50] = cast(%x) {dtype="f32"}
      %v: f32[8,50] = reshape(%f) {shape=[8,50]}
      return(%v)
    })");
  changed = MoveReshapes(h.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

// `v.unsqueeze(0).squeeze(0)` between a prologue and its layer norm used to split the chain
// into two kernels, the first rounding its bf16 result where neither eager nor the exact
// answer rounds (comparisons after it fell the other way). Chains of reshapes that end in
// the sizes they started from are their source.
TEST(MoveReshapesTest, ReshapeChainsThatEndWhereTheyStartedAreTheirSource) {
  constexpr char kText[] = R"(graph(%x: bf16[33,1000]) {
      %a: bf16[33,1000] = abs(%x)
      %u: bf16[1,33,1000] = unsqueeze(%a) {dim=0}
      %r: bf16[33000] = reshape(%u) {shape=[33000]}
      %b: bf16[33,1000] = reshape(%r) {shape=[33,1000]}
      %s: bf16[1,33,1000] = unsqueeze(%b) {dim=0}
      %q: bf16[33,1000] = squeeze(%s) {dims=[0]}
      %y: bf16[33,1000] = layer_norm(%q) {normalized_ndim=1, eps=1e-05}
      return(%y, %s)
    })";
  auto g = Parse(kText);
  auto changed = MoveReshapes(g.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(graph::VerifyGraph(*g).ok()) << graph::PrintGraph(*g);
  // The layer norm reads abs directly; %s (a graph output) is the unsqueeze of abs.
  for (const auto& n : g->nodes()) {
    if (n->kind() == OpKind::kLayerNorm) {
      ASSERT_NE(n->input(0)->producer(), nullptr);
      EXPECT_EQ(n->input(0)->producer()->kind(), OpKind::kAbs) << graph::PrintGraph(*g);
    }
  }
  EXPECT_EQ(g->outputs()[1]->producer()->kind(), OpKind::kUnsqueeze) << graph::PrintGraph(*g);
  EXPECT_EQ(g->outputs()[1]->producer()->input(0)->producer()->kind(), OpKind::kAbs);
  auto full = Parse(kText);
  ASSERT_TRUE(RunFusionPipeline(full.get()).ok());
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
}

}  // namespace
}  // namespace torchfuse::fusion
