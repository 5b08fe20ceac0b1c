#include "fusion/fuse_column_reductions.h"

#include <gtest/gtest.h>

#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using graph::OpKind;

class FuseColumnReductionsTest : public ::testing::Test {
 protected:
  // Parses `text`, runs the whole pipeline and verifies the result.
  void Fuse(const char* text) {
    auto g = graph::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::Status s = RunFusionPipeline(g->get(), PipelineOptions{true, nullptr});
    ASSERT_TRUE(s.ok()) << s;
    s = graph::VerifyGraph(**g);
    ASSERT_TRUE(s.ok()) << s;
    graph_ = std::move(*g);
  }

  std::vector<const graph::Node*> Groups() const {
    std::vector<const graph::Node*> out;
    for (const auto& n : graph_->nodes()) {
      if (n->kind() == OpKind::kFusionGroup) out.push_back(n.get());
    }
    return out;
  }

  // The nodes outside groups other than sources.
  int Loose() const {
    int n = 0;
    for (const auto& node : graph_->nodes()) {
      n += node->kind() != OpKind::kFusionGroup && node->kind() != OpKind::kParam &&
           node->kind() != OpKind::kConstant;
    }
    return n;
  }

  static int Count(const graph::Graph& g, OpKind kind) {
    int n = 0;
    for (const auto& node : g.nodes()) n += node->kind() == kind;
    return n;
  }

  std::string Printed() const { return graph::PrintGraph(*graph_); }

  std::unique_ptr<graph::Graph> graph_;
};

TEST_F(FuseColumnReductionsTest, SumOverTheFirstDimIsOneColumnGroup) {
  Fuse(R"(graph(%x: f32[4096,1024]) {
      %s: f32[1024] = sum(%x) {dims=[0], keepdim=0}
      return(%s)
    })");
  ASSERT_EQ(Groups().size(), 1u) << Printed();
  EXPECT_EQ(Groups()[0]->StringAttr("name"), "column_sum");
  EXPECT_EQ(Loose(), 0) << Printed();
}

TEST_F(FuseColumnReductionsTest, PrologueOverTwoLeadingDimsJoins) {
  Fuse(R"(graph(%x: bf16[8,512,768], %y: bf16[8,512,768]) {
      %m: bf16[8,512,768] = mul(%x, %y)
      %s: bf16[768] = sum(%m) {dims=[0,1], keepdim=0}
      return(%s)
    })");
  ASSERT_EQ(Groups().size(), 1u) << Printed();
  EXPECT_EQ(Loose(), 0) << Printed();
  EXPECT_EQ(Count(*Groups()[0]->body(), OpKind::kMul), 1);
}

TEST_F(FuseColumnReductionsTest, LayerNormWeightAndBiasGradientsShareOneGroup) {
  // dw = sum(g * xhat, (0, 1)), db = sum(g, (0, 1)), reduced in f32 and cast back.
  Fuse(R"(graph(%g: bf16[4,16,64], %xhat: f32[4,16,64]) {
      %gf: f32[4,16,64] = cast(%g) {dtype="f32"}
      %p: f32[4,16,64] = mul(%gf, %xhat)
      %dw: f32[64] = sum(%p) {dims=[0,1], keepdim=0}
      %db: f32[64] = sum(%gf) {dims=[0,1], keepdim=0}
      %dw16: bf16[64] = cast(%dw) {dtype="bf16"}
      %db16: bf16[64] = cast(%db) {dtype="bf16"}
      return(%dw16, %db16)
    })");
  ASSERT_EQ(Groups().size(), 1u) << Printed();
  EXPECT_EQ(Loose(), 0) << Printed();
  const graph::Graph& body = *Groups()[0]->body();
  EXPECT_EQ(Count(body, OpKind::kSum), 2);
  EXPECT_EQ(Count(body, OpKind::kCast), 3);  // the prologue's and both epilogues'
  EXPECT_EQ(Groups()[0]->num_outputs(), 2);
}

TEST_F(FuseColumnReductionsTest, APrologueValueUsedOutsideIsStoredByTheGroup) {
  // gelu's gradient feeds a matmul and the bias gradient: one kernel computes and stores it
  // and sums its columns.
  Fuse(R"(graph(%g: f32[256,64], %x: f32[256,64], %w: f32[64,32]) {
      %d: f32[256,64] = gelu(%x)
      %p: f32[256,64] = mul(%g, %d)
      %db: f32[64] = sum(%p) {dims=[0], keepdim=0}
      %mm: f32[256,32] = matmul(%p, %w)
      return(%db, %mm)
    })");
  ASSERT_EQ(Groups().size(), 1u) << Printed();
  EXPECT_EQ(Groups()[0]->num_outputs(), 2);
  EXPECT_EQ(Loose(), 1) << Printed();  // the matmul
}

TEST_F(FuseColumnReductionsTest, KeepdimResultsAndAnEpilogueJoin) {
  Fuse(R"(graph(%x: f32[32,8,16]) {
      %m: f32[1,8,16] = mean(%x) {dims=[0], keepdim=1}
      %a: f32[1,8,16] = amax(%x) {dims=[0], keepdim=1}
      %d: f32[1,8,16] = sub(%a, %m)
      return(%d)
    })");
  ASSERT_EQ(Groups().size(), 1u) << Printed();
  EXPECT_EQ(Loose(), 0) << Printed();
  EXPECT_EQ(Count(*Groups()[0]->body(), OpKind::kSub), 1);
}

TEST_F(FuseColumnReductionsTest, AValueBroadcastBackOverTheColumnsStaysOut) {
  // x - mean(x, 0) needs the mean at every element: a second pass, so the subtraction is
  // an elementwise group of its own.
  Fuse(R"(graph(%x: f32[128,64]) {
      %m: f32[1,64] = mean(%x) {dims=[0], keepdim=1}
      %d: f32[128,64] = sub(%x, %m)
      return(%d)
    })");
  ASSERT_EQ(Groups().size(), 2u) << Printed();
  int column = 0;
  for (const graph::Node* g : Groups()) {
    column += g->StringAttr("name").rfind("column_", 0) == 0;
  }
  EXPECT_EQ(column, 1) << Printed();
}

TEST_F(FuseColumnReductionsTest, ReductionsOfOtherDimsMakeOtherGroups) {
  Fuse(R"(graph(%x: f32[64,32]) {
      %a: f32[32] = sum(%x) {dims=[0], keepdim=0}
      %b: f32[64] = sum(%x) {dims=[1], keepdim=0}
      return(%a, %b)
    })");
  ASSERT_EQ(Groups().size(), 2u) << Printed();
  EXPECT_EQ(Loose(), 0);
}

TEST_F(FuseColumnReductionsTest, IsColumnReductionLeavesTheInnermostDimOut) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,8,16], %i: i64[4,8]) {
      %a: f32[8,16] = sum(%x) {dims=[0], keepdim=0}
      %b: f32[4,16] = sum(%x) {dims=[1], keepdim=0}
      %c: f32[4,8] = sum(%x) {dims=[-1], keepdim=0}
      %d: f32[] = sum(%x) {dims=[], keepdim=0}
      %e: i64[8] = sum(%i) {dims=[0], keepdim=0}
      %f: f32[16] = amin(%x) {dims=[0,1], keepdim=0}
      return(%a, %b, %c, %d, %e, %f)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<const graph::Node*> n;
  for (const auto& node : (*g)->nodes()) n.push_back(node.get());
  ASSERT_EQ(n.size(), 6u);
  EXPECT_TRUE(IsColumnReduction(*n[0]));
  EXPECT_TRUE(IsColumnReduction(*n[1]));
  EXPECT_FALSE(IsColumnReduction(*n[2]));  // a row reduction
  EXPECT_FALSE(IsColumnReduction(*n[3]));  // everything
  EXPECT_FALSE(IsColumnReduction(*n[4]));  // integers
  EXPECT_TRUE(IsColumnReduction(*n[5]));
}

TEST_F(FuseColumnReductionsTest, EmptyTensorsAreReducedByTorch) {
  // Over no rows (eager's zeros) or over no columns (an empty result): torch gives eager's
  // values; a kernel would have no extent to launch over.
  Fuse(R"(graph(%x: f32[0,16], %y: f32[16,0]) {
      %a: f32[16] = sum(%x) {dims=[0], keepdim=0}
      %b: f32[0] = amax(%y) {dims=[0], keepdim=0}
      return(%a, %b)
    })");
  EXPECT_EQ(Count(*graph_, OpKind::kSum), 1) << Printed();
  EXPECT_EQ(Count(*graph_, OpKind::kAmax), 1) << Printed();
  for (const graph::Node* g : Groups()) {
    EXPECT_EQ(Count(*g->body(), OpKind::kSum) + Count(*g->body(), OpKind::kAmax), 0) << Printed();
  }
}

}  // namespace
}  // namespace torchfuse::fusion
