#include "fusion/fuse_row_reductions.h"

#include <string>

#include <gtest/gtest.h>

#include "fusion/decompose_row_ops.h"
#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using graph::OpKind;

class FuseRowReductionsTest : public ::testing::Test {
 protected:
  // Parses `before`, runs the whole pipeline, verifies, and returns the printed result.
  std::string Fuse(const std::string& before) {
    auto g = graph::ParseGraph(before);
    EXPECT_TRUE(g.ok()) << g.status();
    absl::Status s = RunFusionPipeline(g->get(), PipelineOptions{true, nullptr});
    EXPECT_TRUE(s.ok()) << s;
    s = graph::VerifyGraph(**g);
    EXPECT_TRUE(s.ok()) << s;
    graph_ = std::move(*g);
    return graph::PrintGraph(*graph_);
  }

  // The single fusion group of the graph, which must hold every compute node.
  const graph::Node* OnlyGroup() const {
    const graph::Node* group = nullptr;
    for (const auto& n : graph_->nodes()) {
      if (n->kind() == OpKind::kFusionGroup) {
        EXPECT_EQ(group, nullptr) << "more than one group:\n" << graph::PrintGraph(*graph_);
        group = n.get();
      } else {
        EXPECT_TRUE(n->kind() == OpKind::kParam || n->kind() == OpKind::kConstant)
            << "left outside: " << graph::OpName(n->kind()) << "\n" << graph::PrintGraph(*graph_);
      }
    }
    EXPECT_NE(group, nullptr) << graph::PrintGraph(*graph_);
    return group;
  }

  int Count(const graph::Graph& g, OpKind kind) const {
    int n = 0;
    for (const auto& node : g.nodes()) n += node->kind() == kind;
    return n;
  }

  std::unique_ptr<graph::Graph> graph_;
};

TEST_F(FuseRowReductionsTest, HandWrittenSoftmaxIsOneGroup) {
  EXPECT_EQ(Fuse(R"(graph(%x: f32[64,1024]) {
      %m: f32[64,1] = amax(%x) {dims=[-1], keepdim=1}
      %d: f32[64,1024] = sub(%x, %m)
      %e: f32[64,1024] = exp(%d)
      %s: f32[64,1] = sum(%e) {dims=[-1], keepdim=1}
      %y: f32[64,1024] = div(%e, %s)
      return(%y)
    })"),
            "graph(%0: f32[64,1024]) {\n"
            "  %1: f32[64,1024] = fusion_group(%0) {name=\"softmax\"} graph(%2: f32[64,1024]) {\n"
            "    %3: f32[64,1] = amax(%2) {dims=[-1], keepdim=1}\n"
            "    %4: f32[64,1024] = sub(%2, %3)\n"
            "    %5: f32[64,1024] = exp(%4)\n"
            "    %6: f32[64,1] = sum(%5) {dims=[-1], keepdim=1}\n"
            "    %7: f32[64,1024] = div(%5, %6)\n"
            "    return(%7)\n"
            "  }\n"
            "  return(%1)\n"
            "}\n");
}

TEST_F(FuseRowReductionsTest, HandWrittenLayerNormIsOneGroupWithItsParameters) {
  EXPECT_EQ(Fuse(R"(graph(%x: f32[8,16,32]) {
      %w: f32[32] = param() {name="weight"}
      %b: f32[32] = param() {name="bias"}
      %mu: f32[8,16,1] = mean(%x) {dims=[-1], keepdim=1}
      %d: f32[8,16,32] = sub(%x, %mu)
      %two: i64[] = constant() {dtype="i64", value=2, wrapped=1}
      %sq: f32[8,16,32] = pow(%d, %two)
      %var: f32[8,16,1] = mean(%sq) {dims=[-1], keepdim=1}
      %eps: f64[] = constant() {dtype="f64", value=1e-05, wrapped=1}
      %ve: f32[8,16,1] = add(%var, %eps)
      %sd: f32[8,16,1] = sqrt(%ve)
      %n: f32[8,16,32] = div(%d, %sd)
      %y: f32[8,16,32] = mul(%n, %w)
      %z: f32[8,16,32] = add(%y, %b)
      return(%z)
    })"),
            "graph(%0: f32[8,16,32]) {\n"
            "  %1: f32[32] = param() {name=\"weight\"}\n"
            "  %2: f32[32] = param() {name=\"bias\"}\n"
            "  %3: f32[8,16,32] = fusion_group(%0, %1, %2) {name=\"layer_norm\"} "
            "graph(%4: f32[8,16,32], %5: f32[32], %6: f32[32]) {\n"
            "    %7: f32[8,16,1] = mean(%4) {dims=[-1], keepdim=1}\n"
            "    %8: f32[8,16,32] = sub(%4, %7)\n"
            "    %9: i64[] = constant() {dtype=\"i64\", value=2, wrapped=1}\n"
            "    %10: f32[8,16,32] = pow(%8, %9)\n"
            "    %11: f32[8,16,1] = mean(%10) {dims=[-1], keepdim=1}\n"
            "    %12: f64[] = constant() {dtype=\"f64\", value=1.0000000000000001e-05, wrapped=1}\n"
            "    %13: f32[8,16,1] = add(%11, %12)\n"
            "    %14: f32[8,16,1] = sqrt(%13)\n"
            "    %15: f32[8,16,32] = div(%8, %14)\n"
            "    %16: f32[8,16,32] = mul(%15, %5)\n"
            "    %17: f32[8,16,32] = add(%16, %6)\n"
            "    return(%17)\n"
            "  }\n"
            "  return(%3)\n"
            "}\n");
}

TEST_F(FuseRowReductionsTest, RmsNormIsOneGroup) {
  Fuse(R"(graph(%x: bf16[64,1024]) {
      %w: bf16[1024] = param() {name="weight"}
      %sq: bf16[64,1024] = mul(%x, %x)
      %ms: bf16[64,1] = mean(%sq) {dims=[-1], keepdim=1}
      %eps: f64[] = constant() {dtype="f64", value=1e-06, wrapped=1}
      %a: bf16[64,1] = add(%ms, %eps)
      %r: bf16[64,1] = rsqrt(%a)
      %y: bf16[64,1024] = mul(%x, %r)
      %z: bf16[64,1024] = mul(%y, %w)
      return(%z)
    })");
  const graph::Node* g = OnlyGroup();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->StringAttr("name"), "rms_norm");
  EXPECT_EQ(Count(*g->body(), OpKind::kMean), 1);
}

TEST_F(FuseRowReductionsTest, TorchSoftmaxIsDecomposedAndFusedInF32) {
  EXPECT_EQ(Fuse(R"(graph(%x: bf16[8,65536]) {
      %y: bf16[8,65536] = softmax(%x) {dim=-1}
      return(%y)
    })"),
            "graph(%0: bf16[8,65536]) {\n"
            "  %1: bf16[8,65536] = fusion_group(%0) {name=\"softmax\"} graph(%2: bf16[8,65536]) {\n"
            "    %3: f32[8,65536] = cast(%2) {dtype=\"f32\"}\n"
            "    %4: f32[8,1] = amax(%3) {dims=[1], keepdim=1}\n"
            "    %5: f32[8,65536] = sub(%3, %4)\n"
            "    %6: f32[8,65536] = exp(%5)\n"
            "    %7: f32[8,1] = sum(%6) {dims=[1], keepdim=1}\n"
            "    %8: f32[8,65536] = div(%6, %7)\n"
            "    %9: bf16[8,65536] = cast(%8) {dtype=\"bf16\"}\n"
            "    return(%9)\n"
            "  }\n"
            "  return(%1)\n"
            "}\n");
}

TEST_F(FuseRowReductionsTest, ScaledLogSoftmaxIsOneGroup) {
  Fuse(R"(graph(%x: f32[64,1024]) {
      %c: f64[] = constant() {dtype="f64", value=0.125, wrapped=1}
      %s: f32[64,1024] = mul(%x, %c)
      %y: f32[64,1024] = log_softmax(%s) {dim=1}
      return(%y)
    })");
  const graph::Node* g = OnlyGroup();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->StringAttr("name"), "log_softmax");
  EXPECT_EQ(Count(*g->body(), OpKind::kMul), 1);  // the scale, inside
  EXPECT_EQ(Count(*g->body(), OpKind::kLog), 1);
}

TEST_F(FuseRowReductionsTest, BiasResidualLayerNormIsOneGroup) {
  Fuse(R"(graph(%x: f16[4,8,256], %r: f16[4,8,256]) {
      %b: f16[256] = param() {name="bias"}
      %w: f16[256] = param() {name="weight"}
      %nb: f16[256] = param() {name="norm_bias"}
      %xb: f16[4,8,256] = add(%x, %b)
      %h: f16[4,8,256] = add(%xb, %r)
      %y: f16[4,8,256] = layer_norm(%h, %w, %nb) {eps=1e-05, normalized_ndim=1}
      return(%y)
    })");
  const graph::Node* g = OnlyGroup();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->StringAttr("name"), "layer_norm");
  EXPECT_EQ(g->inputs().size(), 5u);
  EXPECT_EQ(Count(*g->body(), OpKind::kRsqrt), 1);
}

// Adds of NCHW shape [2,8,5,6] (not the norm's own, which are over NHWC rows).
// ConvNeXt's norm: conv(x) + bias in NCHW (%a), permuted to NHWC, layer norm over C; the
// graph returns `returns`.
std::string ChannelsLastNorm(const std::string& returns) {
  return R"(graph(%c: f32[2,8,5,6], %b: f32[8]) {
      %w: f32[8] = param() {name="weight"}
      %nb: f32[8] = param() {name="norm_bias"}
      %bv: f32[1,8,1,1] = reshape(%b) {shape=[1,8,1,1]}
      %a: f32[2,8,5,6] = add(%c, %bv)
      %p: f32[2,5,6,8] = permute(%a) {dims=[0,2,3,1]}
      %y: f32[2,5,6,8] = layer_norm(%p, %w, %nb) {eps=1e-05, normalized_ndim=1}
      return()" + returns + R"()
    })";
}

int NchwAdds(const graph::Graph& body) {
  int n = 0;
  for (const auto& node : body.nodes()) {
    n += node->kind() == OpKind::kAdd &&
         node->output()->type().sizes == std::vector<int64_t>{2, 8, 5, 6};
  }
  return n;
}

TEST_F(FuseRowReductionsTest, ChannelsLastLayerNormTakesTheBiasAddBeforeItsPermute) {
  // ConvNeXt: conv(x) + bias in NCHW, permuted to NHWC, layer norm over C. The add is computed
  // inside the norm's kernel at each row element, through the permute.
  Fuse(ChannelsLastNorm("%y"));
  // One kernel; the bias's reshape is a view outside it.
  const graph::Node* g = nullptr;
  for (const auto& n : graph_->nodes()) {
    if (n->kind() == OpKind::kFusionGroup) {
      EXPECT_EQ(g, nullptr) << graph::PrintGraph(*graph_);
      g = n.get();
    }
  }
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->StringAttr("name"), "layer_norm");
  EXPECT_EQ(Count(*g->body(), OpKind::kPermute), 1) << graph::PrintGraph(*graph_);
  EXPECT_EQ(NchwAdds(*g->body()), 1) << graph::PrintGraph(*graph_);
  EXPECT_EQ(g->num_outputs(), 1);
  // Where the sum is also read outside, the group would have to write it in NCHW: it stays
  // out, and the norm reads it.
  Fuse(ChannelsLastNorm("%y, %a"));
  int groups = 0;
  for (const auto& n : graph_->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    ++groups;
    if (n->StringAttr("name") == "layer_norm") {
      EXPECT_EQ(NchwAdds(*n->body()), 0) << graph::PrintGraph(*graph_);
    }
  }
  EXPECT_EQ(groups, 2) << graph::PrintGraph(*graph_);
}

TEST_F(FuseRowReductionsTest, ReducedValueUsedOutsideBecomesAnOutput) {
  Fuse(R"(graph(%x: f32[16,128]) {
      %m: f32[16,1] = mean(%x) {dims=[-1], keepdim=1}
      %d: f32[16,128] = sub(%x, %m)
      %t: f32[16,128] = opaque(%d) {handle=0, target="aten::cumsum"}
      return(%t, %m)
    })");
  int groups = 0;
  for (const auto& n : graph_->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    ++groups;
    EXPECT_EQ(n->num_outputs(), 2);  // d and m
  }
  EXPECT_EQ(groups, 1);
}

TEST_F(FuseRowReductionsTest, ReductionsOverOtherDimsAreNotRowGroups) {
  Fuse(R"(graph(%x: f32[16,128]) {
      %e: f32[16,128] = exp(%x)
      %s: f32[1,128] = sum(%e) {dims=[0], keepdim=1}
      %y: f32[16,128] = div(%e, %s)
      %v: f32[16,128] = softmax(%x) {dim=0}
      return(%y, %v)
    })");
  EXPECT_EQ(Count(*graph_, OpKind::kSoftmax), 1);  // over dim 0: left to torch
  // The column sum with its exp (stored for the division), and the division.
  ASSERT_EQ(Count(*graph_, OpKind::kFusionGroup), 2);
  EXPECT_EQ(Count(*graph_, OpKind::kSum), 0);
  for (const auto& n : graph_->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    const bool column = n->StringAttr("name").rfind("column_", 0) == 0;
    EXPECT_EQ(Count(*n->body(), OpKind::kSum), column ? 1 : 0);
    EXPECT_EQ(Count(*n->body(), OpKind::kDiv), column ? 0 : 1);
  }
}

TEST_F(FuseRowReductionsTest, EmptyTensorsAreLeftWholeToTorch) {
  // Softmax of empty rows decomposed would take the max of no elements (an error in ATen),
  // and no row kernel runs empty rows: torch gives eager's values.
  Fuse(R"(graph(%x: f32[2,0], %y: f32[0,7]) {
      %a: f32[2,0] = log_softmax(%x) {dim=-1}
      %s: f32[2] = sum(%x) {dims=[-1], keepdim=0}
      %m: f32[0,1] = mean(%y) {dims=[-1], keepdim=1}
      %v: f32[0] = var(%y) {correction=1, dims=[-1], keepdim=0}
      return(%a, %s, %m, %v)
    })");
  EXPECT_EQ(Count(*graph_, OpKind::kLogSoftmax), 1);
  EXPECT_EQ(Count(*graph_, OpKind::kSum), 1);
  EXPECT_EQ(Count(*graph_, OpKind::kMean), 1);
  EXPECT_EQ(Count(*graph_, OpKind::kVar), 1);
  EXPECT_EQ(Count(*graph_, OpKind::kFusionGroup), 0);
}

TEST_F(FuseRowReductionsTest, VarIsDecomposedOverTheLastDimOnly) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[16,128]) {
      %v: f32[16] = var(%x) {correction=1, dims=[-1], keepdim=0}
      %w: f32[128] = var(%x) {correction=1, dims=[0], keepdim=0}
      return(%v, %w)
    })");
  ASSERT_TRUE(g.ok());
  auto changed = DecomposeRowOps(g->get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Count(**g, OpKind::kVar), 1);
  EXPECT_EQ(Count(**g, OpKind::kMean), 1);
  EXPECT_EQ(Count(**g, OpKind::kSum), 1);
  EXPECT_TRUE(graph::VerifyGraph(**g).ok());
}

TEST_F(FuseRowReductionsTest, ReductionOverTheLastDimsIsOneRowOverThemMerged) {
  // A global average pool (mean over H and W of NCHW) after an activation: the pooled rows
  // are H * W long; dims that are not the last ones, or all of them, stay as they are.
  auto g = graph::ParseGraph(R"(graph(%x: f32[2,8,7,5], %y: f32[2,8,7,5]) {
      %a: f32[2,8,7,5] = relu(%x)
      %m: f32[2,8,1,1] = mean(%a) {dims=[2,3], keepdim=1}
      %s: f32[2] = sum(%x) {dims=[-3,-2,-1], keepdim=0}
      %k: f32[2,8] = amax(%y) {dims=[3,2], keepdim=0}
      %n: f32[2,5] = sum(%x) {dims=[1,2], keepdim=0}
      %t: f32[] = sum(%x) {dims=[0,1,2,3], keepdim=0}
      return(%m, %s, %k, %n, %t)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  auto changed = MergeTrailingReductionDims(g->get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(graph::VerifyGraph(**g).ok());
  std::vector<std::vector<int64_t>> rows;  // the merged input of each row reduction
  for (const auto& n : (*g)->nodes()) {
    if (IsRowReduction(*n)) rows.push_back(n->input(0)->type().sizes);
  }
  EXPECT_EQ(rows, (std::vector<std::vector<int64_t>>{{2, 8, 35}, {2, 280}, {2, 8, 35}}));
  EXPECT_EQ(Count(**g, OpKind::kReshape), 6);  // in and out of each merged one
  // The outputs keep their shapes.
  const auto& outs = (*g)->outputs();
  EXPECT_EQ(outs[0]->type().sizes, (std::vector<int64_t>{2, 8, 1, 1}));
  EXPECT_EQ(outs[1]->type().sizes, (std::vector<int64_t>{2}));
  EXPECT_EQ(outs[2]->type().sizes, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(outs[2]->producer()->kind(), OpKind::kReshape);
  EXPECT_EQ(outs[3]->producer()->kind(), OpKind::kSum);  // dims 1 and 2: not the last ones
  EXPECT_EQ(outs[4]->producer()->kind(), OpKind::kSum);  // every dim
}

TEST_F(FuseRowReductionsTest, PoolsOfOneValueAndTheActivationBeforeThemAreOneRowKernel) {
  // A global average and max pool of one activation (an SE block's, a head's): one reshape
  // of the input, moved before the activation, and one row kernel computing both.
  Fuse(R"(graph(%x: f32[2,8,7,5]) {
      %a: f32[2,8,7,5] = relu(%x)
      %m: f32[2,8,1,1] = mean(%a) {dims=[2,3], keepdim=1}
      %k: f32[2,8] = amax(%a) {dims=[-1,-2], keepdim=0}
      return(%m, %k)
    })");
  ASSERT_EQ(Count(*graph_, OpKind::kFusionGroup), 1) << graph::PrintGraph(*graph_);
  for (const auto& n : graph_->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    EXPECT_EQ(Count(*n->body(), OpKind::kRelu), 1);
    EXPECT_EQ(Count(*n->body(), OpKind::kMean), 1);
    EXPECT_EQ(Count(*n->body(), OpKind::kAmax), 1);
    EXPECT_EQ(n->input(0)->type().sizes, (std::vector<int64_t>{2, 8, 35}));
  }
}

TEST_F(FuseRowReductionsTest, IsRowReductionNeedsTheLastDimOfAFloatingTensor) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,8], %i: i64[4,8]) {
      %a: f32[4] = sum(%x) {dims=[1], keepdim=0}
      %b: f32[] = sum(%x) {dims=[], keepdim=0}
      %c: i64[4] = sum(%i) {dims=[-1], keepdim=0}
      %d: f32[4,1] = amin(%x) {dims=[-1], keepdim=1}
      return(%a, %b, %c, %d)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  const auto& n = (*g)->nodes();
  EXPECT_TRUE(IsRowReduction(*n[0]));
  EXPECT_FALSE(IsRowReduction(*n[1]));
  EXPECT_FALSE(IsRowReduction(*n[2]));
  EXPECT_TRUE(IsRowReduction(*n[3]));
}

}  // namespace
}  // namespace torchfuse::fusion
