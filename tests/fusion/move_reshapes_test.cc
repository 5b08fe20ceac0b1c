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

}  // namespace
}  // namespace torchfuse::fusion
