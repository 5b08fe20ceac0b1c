#include "fusion/fuse_elementwise.h"

#include <gtest/gtest.h>

#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

class FuseElementwiseTest : public ::testing::Test {
 protected:
  // Parses `before`, runs the pass, verifies, and returns the printed result.
  std::string Fuse(const char* before, bool expect_change = true) {
    auto g = graph::ParseGraph(before);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(graph::VerifyGraph(**g).ok());
    auto changed = FuseElementwise(g->get());
    EXPECT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, expect_change);
    absl::Status s = graph::VerifyGraph(**g);
    EXPECT_TRUE(s.ok()) << s << "\n" << graph::PrintGraph(**g);
    graph_ = std::move(*g);
    return graph::PrintGraph(*graph_);
  }

  // The output sizes of each group, in graph order.
  std::vector<std::vector<int64_t>> GroupSizes() const {
    std::vector<std::vector<int64_t>> out;
    for (const auto& node : graph_->nodes()) {
      if (node->kind() == graph::OpKind::kFusionGroup) out.push_back(node->output()->type().sizes);
    }
    return out;
  }

  int CountGroups() const {
    int n = 0;
    for (const auto& node : graph_->nodes()) n += node->kind() == graph::OpKind::kFusionGroup;
    return n;
  }

  std::unique_ptr<graph::Graph> graph_;
};

TEST_F(FuseElementwiseTest, FusesChainIntoOneGroupWithConstantsInside) {
  EXPECT_EQ(Fuse(R"(graph(%x: f32[8,16]) {
      %c: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %a: f32[8,16] = mul(%x, %c)
      %t: f32[8,16] = tanh(%a)
      %y: f32[8,16] = add(%t, %x)
      return(%y)
    })"),
            "graph(%0: f32[8,16]) {\n"
            "  %1: f32[8,16] = fusion_group(%0) {name=\"mul_tanh_add\"} graph(%2: f32[8,16]) {\n"
            "    %3: f64[] = constant() {dtype=\"f64\", value=0.5, wrapped=1}\n"
            "    %4: f32[8,16] = mul(%2, %3)\n"
            "    %5: f32[8,16] = tanh(%4)\n"
            "    %6: f32[8,16] = add(%5, %2)\n"
            "    return(%6)\n"
            "  }\n"
            "  return(%1)\n"
            "}\n");
}

TEST_F(FuseElementwiseTest, DoesNotFuseAcrossMatmul) {
  Fuse(R"(graph(%x: f32[8,16], %w: f32[16,16]) {
      %a: f32[8,16] = relu(%x)
      %m: f32[8,16] = linear(%a, %w)
      %b: f32[8,16] = sigmoid(%m)
      return(%b)
    })");
  EXPECT_EQ(CountGroups(), 2);
  int linear = 0;
  for (const auto& n : graph_->nodes()) linear += n->kind() == graph::OpKind::kLinear;
  EXPECT_EQ(linear, 1);
}

TEST_F(FuseElementwiseTest, DoesNotFuseAcrossOpaqueOrReductions) {
  Fuse(R"(graph(%x: f32[8,16]) {
      %a: f32[8,16] = exp(%x)
      %o: f32[8,16] = opaque(%a) {handle=0, target="aten::cumsum"}
      %b: f32[8,16] = neg(%o)
      %s: f32[8,1] = sum(%b) {dims=[-1], keepdim=1}
      %c: f32[8,16] = sub(%b, %s)
      return(%c)
    })");
  // exp | opaque | neg | sum | sub: the sum sits between neg and sub.
  EXPECT_EQ(CountGroups(), 3);
}

TEST_F(FuseElementwiseTest, ValueUsedOutsideBecomesExtraOutput) {
  Fuse(R"(graph(%x: f32[8,16], %w: f32[16,16]) {
      %a: f32[8,16] = exp(%x)
      %b: f32[8,16] = mul(%a, %x)
      %m: f32[8,16] = linear(%a, %w)
      %c: f32[8,16] = add(%m, %x)
      return(%c, %b)
    })");
  // {exp, mul} with outputs a (to the linear) and b; {add} after the linear.
  ASSERT_EQ(CountGroups(), 2);
  const graph::Node* first = graph_->nodes()[0].get();
  ASSERT_EQ(first->kind(), graph::OpKind::kFusionGroup);
  EXPECT_EQ(first->num_outputs(), 2);
}

TEST_F(FuseElementwiseTest, AvoidsCycleThroughOutsideNode) {
  // a feeds the opaque node, whose result feeds c; a and c in one group would be a cycle.
  Fuse(R"(graph(%x: f32[8,16]) {
      %a: f32[8,16] = exp(%x)
      %o: f32[8,16] = opaque(%a) {handle=0, target="aten::cumsum"}
      %c: f32[8,16] = add(%a, %o)
      return(%c)
    })");
  EXPECT_EQ(CountGroups(), 2);
}

TEST_F(FuseElementwiseTest, FusesBroadcastChainWithParams) {
  Fuse(R"(graph(%x: bf16[64,32]) {
      %w: bf16[32] = param() {name="w"}
      %b: bf16[1,32] = param() {name="b"}
      %m: bf16[64,32] = mul(%x, %w)
      %y: bf16[64,32] = add(%m, %b)
      return(%y)
    })");
  ASSERT_EQ(CountGroups(), 1);
  const graph::Node* group = graph_->nodes().back().get();
  EXPECT_EQ(group->inputs().size(), 3u);
  EXPECT_EQ(group->body()->nodes().size(), 2u);
}

TEST_F(FuseElementwiseTest, FusesIndexingLayoutOpsButNotGeneralReshape) {
  Fuse(R"(graph(%x: f32[4,8], %b: f32[8]) {
      %t: f32[8,4] = transpose(%x) {dim0=0, dim1=1}
      %u: f32[1,8] = unsqueeze(%b) {dim=0}
      %v: f32[8,1] = transpose(%u) {dim0=0, dim1=1}
      %y: f32[8,4] = add(%t, %v)
      %r: f32[32] = reshape(%y) {shape=[32]}
      %z: f32[32] = relu(%r)
      return(%z)
    })");
  // transpose/unsqueeze/add fuse; the reshape to [32] merges dims and stays outside.
  ASSERT_EQ(CountGroups(), 2);
  int reshapes = 0;
  for (const auto& n : graph_->nodes()) reshapes += n->kind() == graph::OpKind::kReshape;
  EXPECT_EQ(reshapes, 1);
}

TEST_F(FuseElementwiseTest, FusesSlicesOfStepOneButNotStridedSlices) {
  Fuse(R"(graph(%x: f32[4,16]) {
      %a: f32[4,8] = slice(%x) {dim=1, start=0, end=8, step=1}
      %b: f32[4,8] = slice(%x) {dim=1, start=8, end=16, step=1}
      %s: f32[4,8] = silu(%a)
      %y: f32[4,8] = mul(%s, %b)
      return(%y)
    })");
  ASSERT_EQ(CountGroups(), 1);
  for (const auto& n : graph_->nodes()) {
    EXPECT_NE(n->kind(), graph::OpKind::kSlice) << "a slice was left outside the group";
  }
  Fuse(R"(graph(%x: f32[4,16]) {
      %a: f32[4,8] = slice(%x) {dim=1, start=0, end=16, step=2}
      %y: f32[4,8] = neg(%a)
      return(%y)
    })");
  ASSERT_EQ(CountGroups(), 1);
  int slices = 0;
  for (const auto& n : graph_->nodes()) slices += n->kind() == graph::OpKind::kSlice;
  EXPECT_EQ(slices, 1);  // the step-2 slice is a torch view feeding the group
}

TEST_F(FuseElementwiseTest, FusesCatWithItsOperandsAndConsumers) {
  Fuse(R"(graph(%x: f32[4,16], %c: f32[4,16]) {
      %a: f32[4,8] = slice(%x) {dim=1, start=8, end=16, step=1}
      %n: f32[4,8] = neg(%a)
      %b: f32[4,8] = slice(%x) {dim=1, start=0, end=8, step=1}
      %r: f32[4,16] = cat(%n, %b) {dim=1}
      %y: f32[4,16] = mul(%r, %c)
      return(%y)
    })");
  ASSERT_EQ(CountGroups(), 1);
  EXPECT_EQ(graph_->nodes().size(), 1u) << graph::PrintGraph(*graph_);
}

TEST_F(FuseElementwiseTest, CopiesOfMovedViewsAndCatsAreKernelsButPlainViewsAreNot) {
  // A contiguous copy of a permuted view moves elements: a copy kernel.
  Fuse(R"(graph(%x: f32[2,8,4,16]) {
      %p: f32[2,4,8,16] = permute(%x) {dims=[0,2,1,3]}
      %y: f32[2,4,8,16] = contiguous(%p)
      return(%y)
    })");
  EXPECT_EQ(CountGroups(), 1);
  // A cat alone copies its operands.
  Fuse(R"(graph(%x: f32[4,8], %y: f32[4,8]) {
      %c: f32[8,8] = cat(%x, %y) {dim=0}
      return(%c)
    })");
  EXPECT_EQ(CountGroups(), 1);
  // contiguous of a graph input moves nothing: torch's no-op.
  Fuse(R"(graph(%x: f32[4,8]) {
      %y: f32[4,8] = contiguous(%x)
      return(%y)
    })",
       /*expect_change=*/false);
  EXPECT_EQ(CountGroups(), 0);
}

// What torch reads through views is written once, as the group computes it: an expand that
// broadcasts is not written out copy by copy, and a slice of a whole cat operand (a mask's
// rows padded for ATen's attention) stays a view of the cat, which the kernel writes with its
// room. A stack indexed back by a kernel still fuses (the slice is an index map there).
TEST_F(FuseElementwiseTest, ViewsTorchReadsStayViewsOfWhatTheGroupWrites) {
  Fuse(R"(graph(%b: f32[1,3,49,49], %m: f32[4,1,49,49], %q: f32[4,3,49,32]) {
      %a: f32[4,3,49,49] = add(%m, %b)
      %k: f32[4,3,49,49] = clamp(%a) {min=-100.0}
      %r: f32[4,3,49,7] = slice(%k) {dim=3, start=0, end=7, step=1}
      %c: f32[4,3,49,56] = cat(%k, %r) {dim=3}
      %s: f32[4,3,49,49] = slice(%c) {dim=3, start=0, end=49, step=1}
      %e: f32[4,3,49,49] = expand(%s) {shape=[4,3,49,49]}
      %o: f32[4,3,49,32] = opaque(%q, %e) {handle=0, target="aten::_scaled_dot_product_efficient_attention"}
      return(%o)
    })");
  EXPECT_EQ(GroupSizes(), (std::vector<std::vector<int64_t>>{{4, 3, 49, 56}}))
      << graph::PrintGraph(*graph_);
  for (const auto& n : graph_->nodes()) {
    if (n->kind() == graph::OpKind::kSlice) {
      EXPECT_EQ(n->input(0)->producer()->kind(), graph::OpKind::kFusionGroup);
    }
  }
  // A bias alone, broadcast along the batch for torch: the group writes [1,3,49,56].
  Fuse(R"(graph(%b: f32[1,3,49,49], %q: f32[8,3,49,32]) {
      %k: f32[1,3,49,49] = clamp(%b) {min=-100.0}
      %r: f32[1,3,49,7] = slice(%k) {dim=3, start=0, end=7, step=1}
      %c: f32[1,3,49,56] = cat(%k, %r) {dim=3}
      %s: f32[1,3,49,49] = slice(%c) {dim=3, start=0, end=49, step=1}
      %e: f32[8,3,49,49] = expand(%s) {shape=[8,3,49,49]}
      %o: f32[8,3,49,32] = opaque(%q, %e) {handle=0, target="aten::_scaled_dot_product_efficient_attention"}
      return(%o)
    })");
  EXPECT_EQ(GroupSizes(), (std::vector<std::vector<int64_t>>{{1, 3, 49, 56}}))
      << graph::PrintGraph(*graph_);
  // An expand that broadcasts a result to torch: written once, expanded by torch.
  Fuse(R"(graph(%b: f32[1,64]) {
      %n: f32[1,64] = neg(%b)
      %e: f32[32,64] = expand(%n) {shape=[32,64]}
      %o: f32[32,64] = opaque(%e) {handle=0, target="aten::cumsum"}
      return(%o)
    })");
  EXPECT_EQ(GroupSizes(), (std::vector<std::vector<int64_t>>{{1, 64}}))
      << graph::PrintGraph(*graph_);
  // A stack whose second operand a kernel reads back: one group, the slice in it.
  Fuse(R"(graph(%x: f32[8,64]) {
      %n: f32[8,64] = neg(%x)
      %u: f32[1,8,64] = unsqueeze(%x) {dim=0}
      %v: f32[1,8,64] = unsqueeze(%n) {dim=0}
      %c: f32[2,8,64] = cat(%u, %v) {dim=0}
      %s: f32[1,8,64] = slice(%c) {dim=0, start=1, end=2, step=1}
      %q: f32[8,64] = squeeze(%s) {dims=[0]}
      %y: f32[8,64] = mul(%q, %x)
      return(%y)
    })");
  EXPECT_EQ(graph_->nodes().size(), 1u) << graph::PrintGraph(*graph_);
}

TEST_F(FuseElementwiseTest, DoesNotFireOnLoneViews) {
  Fuse(R"(graph(%x: f32[4,8], %w: f32[4,8]) {
      %t: f32[8,4] = transpose(%x) {dim0=0, dim1=1}
      %m: f32[8,8] = matmul(%t, %w)
      return(%m)
    })",
       /*expect_change=*/false);
  EXPECT_EQ(CountGroups(), 0);
}

TEST_F(FuseElementwiseTest, KeepsDifferentShapedOutputOutOfTheGroup) {
  // s = b*2 has shape [16] and is also returned: it cannot be written over the [8,16] domain.
  Fuse(R"(graph(%x: f32[8,16], %b: f32[16]) {
      %c: f64[] = constant() {dtype="f64", value=2.0, wrapped=1}
      %s: f32[16] = mul(%b, %c)
      %y: f32[8,16] = add(%x, %s)
      return(%y, %s)
    })");
  EXPECT_EQ(CountGroups(), 2);
  for (const auto& n : graph_->nodes()) {
    if (n->kind() != graph::OpKind::kFusionGroup) continue;
    for (int i = 0; i < n->num_outputs(); ++i) {
      EXPECT_EQ(n->output(i)->type().sizes, n->body()->outputs()[0]->type().sizes);
    }
  }
}

TEST_F(FuseElementwiseTest, MergesSiblingsThatReadTheSameInput) {
  Fuse(R"(graph(%x: f32[8,16]) {
      %a: f32[8,16] = exp(%x)
      %b: f32[8,16] = relu(%x)
      return(%a, %b)
    })");
  ASSERT_EQ(CountGroups(), 1);
  EXPECT_EQ(graph_->nodes()[0]->num_outputs(), 2);
  EXPECT_EQ(graph_->nodes()[0]->inputs().size(), 1u);
}

TEST_F(FuseElementwiseTest, DoesNotMergeSiblingsOfDifferentDomains) {
  Fuse(R"(graph(%x: f32[8,16], %y: f32[16]) {
      %a: f32[8,16] = add(%x, %y)
      %b: f32[16] = neg(%y)
      return(%a, %b)
    })");
  EXPECT_EQ(CountGroups(), 2);
}

// LLaMA's rotary tables: cos and sin of one cat. The sin group takes the cat when it grows;
// the cos group, which stops at the cat, joins it: one kernel, no f32 table stored and read
// back.
TEST_F(FuseElementwiseTest, MergesAGroupIntoTheGroupWhoseValueItReads) {
  Fuse(R"(graph(%f: f32[1,64,1024]) {
      %t: f32[1,1024,64] = transpose(%f) {dim0=1, dim1=2}
      %e: f32[1,1024,128] = cat(%t, %t) {dim=2}
      %c: f32[1,1024,128] = cos(%e)
      %cb: bf16[1,1024,128] = cast(%c) {dtype="bf16"}
      %s: f32[1,1024,128] = sin(%e)
      %sb: bf16[1,1024,128] = cast(%s) {dtype="bf16"}
      return(%cb, %sb)
    })");
  ASSERT_EQ(CountGroups(), 1) << graph::PrintGraph(*graph_);
  EXPECT_EQ(graph_->nodes()[0]->num_outputs(), 2);
}

// ... unless a path through another node joins them: b reads a directly and through a
// matmul, so merging would make a cycle.
TEST_F(FuseElementwiseTest, DoesNotMergeAProducerAndConsumerWithAPathBetweenThem) {
  Fuse(R"(graph(%x: f32[16,16]) {
      %a: f32[16,16] = exp(%x)
      %m: f32[16,16] = matmul(%a, %x)
      %b: f32[16,16] = mul(%a, %m)
      return(%b)
    })");
  EXPECT_EQ(CountGroups(), 2) << graph::PrintGraph(*graph_);
}

TEST_F(FuseElementwiseTest, NamesGeluGroups) {
  Fuse(R"(graph(%x: f32[8,16]) {
      %h: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %three: i64[] = constant() {dtype="i64", value=3, wrapped=1}
      %p: f32[8,16] = pow(%x, %three)
      %t: f32[8,16] = tanh(%p)
      %m: f32[8,16] = mul(%x, %h)
      %y: f32[8,16] = mul(%m, %t)
      return(%y)
    })");
  ASSERT_EQ(CountGroups(), 1);
  EXPECT_EQ(graph_->nodes()[0]->StringAttr("name"), "gelu");
}

}  // namespace
}  // namespace torchfuse::fusion
