#include "fusion/fuse_matmul_epilogues.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_replace.h"
#include "../support/graph_pass_test.h"
#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using graph::OpKind;

// The scalars of GPT-2's gelu_new.
constexpr char kConstants[] = R"(%half: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
    %one: f64[] = constant() {dtype="f64", value=1.0, wrapped=1}
    %three: f64[] = constant() {dtype="f64", value=3.0, wrapped=1}
    %c1: f64[] = constant() {dtype="f64", value=0.044715, wrapped=1}
    %c2: f64[] = constant() {dtype="f64", value=0.7978845608, wrapped=1})";

// A linear layer of a [2, 4, 16] input as ATen writes it (the product of [8, 16], viewed back),
// GPT-2's constants, then `CHAIN`, which reads %y and defines %g; the graph returns %g. DT is
// the dtype.
constexpr char kLayer[] = R"(graph(%x: DT[8,16], %w: DT[16,32], %b: DT[32]) {
    %m: DT[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0}
    %y: DT[2,4,32] = reshape(%m) {shape=[2,4,32]}
    CONSTANTS
    CHAIN
    return(%g)
  })";

// GPT-2's gelu_new: 0.5 * y * (1 + tanh(sqrt(2 / pi) * (y + 0.044715 * pow(y, 3)))).
constexpr char kPowForm[] = R"(
    %p: DT[2,4,32] = pow(%y, %three)
    %q: DT[2,4,32] = mul(%p, %c1)
    %s: DT[2,4,32] = add(%y, %q)
    %t: DT[2,4,32] = mul(%s, %c2)
    %h: DT[2,4,32] = tanh(%t)
    %u: DT[2,4,32] = add(%h, %one)
    %v: DT[2,4,32] = mul(%y, %half)
    %g: DT[2,4,32] = mul(%v, %u))";

std::string Graph(const std::string& chain, const std::string& dtype = "bf16") {
  return absl::StrReplaceAll(
      absl::StrReplaceAll(kLayer, {{"CHAIN", chain}, {"CONSTANTS", kConstants}}),
      {{"DT", dtype}});
}

class FuseMatmulEpiloguesTest : public test_support::GraphPassTest {
 protected:
  FuseMatmulEpiloguesTest() : GraphPassTest(&FuseMatmulEpilogues) {}

  const graph::Node* Product() const {
    for (const auto& node : graph_->nodes()) {
      if (graph::OpCategoryOf(node->kind()) == graph::OpCategory::kMatmul) return node.get();
    }
    return nullptr;
  }
};

TEST_F(FuseMatmulEpiloguesTest, GptTwosGeluBecomesTheProductsEpilogue) {
  ASSERT_TRUE(Run(Graph(kPowForm)));
  ASSERT_NE(Product(), nullptr);
  EXPECT_EQ(Product()->StringAttr("epilogue"), graph::kGeluTanhEpilogue);
  // The graph returns the product's reshape; the chain and its constants are gone.
  ASSERT_EQ(graph_->outputs().size(), 1u);
  ASSERT_NE(graph_->outputs()[0]->producer(), nullptr);
  EXPECT_EQ(graph_->outputs()[0]->producer()->kind(), OpKind::kReshape);
  EXPECT_EQ(graph_->outputs()[0]->type().ToString(), "bf16[2,4,32]");
  EXPECT_EQ(Count(OpKind::kTanh) + Count(OpKind::kMul) + Count(OpKind::kConstant), 0)
      << graph::PrintGraph(*graph_);
}

TEST_F(FuseMatmulEpiloguesTest, EveryWayOfWritingTheTanhFormIsTaken) {
  const std::string forms[] = {
      // gelu(approximate="tanh") itself.
      "%g: DT[2,4,32] = gelu_tanh(%y)",
      // y * y * y, halved last: (y * (1 + tanh(...))) * 0.5, in f16.
      R"(%a: DT[2,4,32] = mul(%y, %y)
         %p: DT[2,4,32] = mul(%a, %y)
         %q: DT[2,4,32] = mul(%p, %c1)
         %s: DT[2,4,32] = add(%q, %y)
         %t: DT[2,4,32] = mul(%c2, %s)
         %h: DT[2,4,32] = tanh(%t)
         %u: DT[2,4,32] = add(%one, %h)
         %v: DT[2,4,32] = mul(%y, %u)
         %g: DT[2,4,32] = mul(%v, %half))",
      // The sigmoid form, computed in f32 and cast back: y * sigmoid(2 sqrt(2/pi) (y + ...)).
      R"(%f: f32[2,4,32] = cast(%y) {dtype="f32"}
         %two: f64[] = constant() {dtype="f64", value=1.5957691216, wrapped=1}
         %p: f32[2,4,32] = pow(%f, %three)
         %q: f32[2,4,32] = mul(%p, %c1)
         %s: f32[2,4,32] = add(%f, %q)
         %t: f32[2,4,32] = mul(%s, %two)
         %h: f32[2,4,32] = sigmoid(%t)
         %v: f32[2,4,32] = mul(%f, %h)
         %g: DT[2,4,32] = cast(%v) {dtype="DT"})",
  };
  for (const std::string dtype : {"bf16", "f16"}) {
    for (const std::string& chain : forms) {
      SCOPED_TRACE(dtype + ": " + chain);
      ASSERT_TRUE(Run(Graph(chain, dtype)));
      EXPECT_TRUE(Product()->HasAttr("epilogue"));
      EXPECT_EQ(Count(OpKind::kTanh) + Count(OpKind::kSigmoid) + Count(OpKind::kGeluTanh), 0);
    }
  }
}

TEST_F(FuseMatmulEpiloguesTest, OtherCurvesAndFloatProductsStayAsWritten) {
  const std::string chains[] = {
      // The exact GELU.
      "%g: DT[2,4,32] = gelu(%y)",
      // Quick GELU: y * sigmoid(1.702 y), within 2e-2 of the tanh form.
      R"(%k: f64[] = constant() {dtype="f64", value=1.702, wrapped=1}
         %t: DT[2,4,32] = mul(%y, %k)
         %h: DT[2,4,32] = sigmoid(%t)
         %g: DT[2,4,32] = mul(%y, %h))",
      // The tanh form with another coefficient of the cube (0.798 for 0.044715).
      absl::StrReplaceAll(kPowForm, {{"%q: DT[2,4,32] = mul(%p, %c1)",
                                      "%q: DT[2,4,32] = mul(%p, %c2)"}}),
  };
  for (const std::string& chain : chains) {
    SCOPED_TRACE(chain);
    Run(Graph(chain));
    EXPECT_FALSE(Product()->HasAttr("epilogue"));
  }
  // f32: cuBLASLt's GELU epilogue was the slower way there.
  Run(Graph(kPowForm, "f32"));
  EXPECT_FALSE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kTanh), 1);
}

TEST_F(FuseMatmulEpiloguesTest, AProductOrChainValueReadElsewhereStays) {
  // The product itself is also returned: it must be stored, with its bias, without its GELU.
  std::string also_product = absl::StrReplaceAll(Graph(kPowForm), {{"return(%g)",
                                                                    "return(%g, %y)"}});
  EXPECT_FALSE(Run(also_product));
  // tanh(...) is also returned: the chain cannot go.
  Run(absl::StrReplaceAll(Graph(kPowForm), {{"return(%g)", "return(%g, %h)"}}));
  EXPECT_FALSE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kTanh), 1);
  // Something else reads the product: a second reader of %y.
  Run(absl::StrReplaceAll(Graph(std::string(kPowForm) + "\n    %e: bf16[2,4,32] = exp(%y)"),
                          {{"return(%g)", "return(%g, %e)"}}));
  EXPECT_FALSE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kTanh), 1);
}

// A product read by elementwise ops alone (f32 here, or a GELU of another form) loses its bias
// to them: the plain product, then an add of the bias that joins their kernel, as the plain
// product ran up to 6 % faster than cuBLASLt's with the bias epilogue on an H100 (f32
// 8192x3072 @ 3072x768), and the kernel after it reads the bias vector at no cost.
TEST_F(FuseMatmulEpiloguesTest, BiasOfAProductReadByElementwiseOpsJoinsTheirKernel) {
  ASSERT_TRUE(Run(Graph(kPowForm, "f32")));
  ASSERT_NE(Product(), nullptr);
  EXPECT_EQ(Product()->kind(), OpKind::kMatmul);
  EXPECT_EQ(Product()->inputs().size(), 2u);
  // The bias is added to the reshaped product, broadcast over its last dim.
  const graph::Node* reshape = Product()->output()->uses().at(0);
  ASSERT_EQ(reshape->kind(), OpKind::kReshape);
  ASSERT_EQ(reshape->output()->uses().size(), 1u);
  const graph::Node* add = reshape->output()->uses()[0];
  EXPECT_EQ(add->kind(), OpKind::kAdd);
  EXPECT_EQ(add->input(1), graph_->input(2));
  EXPECT_EQ(add->output()->type().ToString(), "f32[2,4,32]");
  EXPECT_EQ(add->output()->uses().size(), 3u);  // pow, add and mul of the GELU
  // Through the pipeline: the product and one kernel, the bias add in it.
  auto g = graph::ParseGraph(Graph(kPowForm, "f32"));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(RunFusionPipeline(g->get(), PipelineOptions{true, nullptr}).ok());
  int groups = 0, biased = 0;
  for (const auto& n : (*g)->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    ++groups;
    for (const auto& b : n->body()->nodes()) biased += b->kind() == OpKind::kAdd;
  }
  EXPECT_EQ(groups, 1) << graph::PrintGraph(**g);
  EXPECT_EQ(biased, 3);  // the bias, y + 0.044715 y^3, 1 + tanh
  // Read by something other than an elementwise op (a row sum), the product keeps its bias.
  EXPECT_FALSE(Run(R"(graph(%x: f32[8,16], %w: f32[16,32], %b: f32[32]) {
      %y: f32[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0}
      %s: f32[8] = sum(%y) {dims=[-1], keepdim=0}
      return(%s)
    })"));
  EXPECT_EQ(Product()->kind(), OpKind::kAddmm);
}

TEST_F(FuseMatmulEpiloguesTest, WhatFollowsTheGeluReadsTheProductsResult) {
  // gelu(y) * 2: the GELU goes into the product, the doubling stays.
  const std::string chain = std::string(kPowForm) + R"(
    %k: f64[] = constant() {dtype="f64", value=2.0, wrapped=1}
    %d: bf16[2,4,32] = mul(%g, %k))";
  ASSERT_TRUE(Run(absl::StrReplaceAll(Graph(chain), {{"return(%g)", "return(%d)"}})));
  EXPECT_TRUE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kMul), 1);
  EXPECT_EQ(Count(OpKind::kTanh), 0);
}

TEST_F(FuseMatmulEpiloguesTest, LinearLayersWithABiasVectorAreTaken) {
  const std::string linear = R"(graph(%x: bf16[2,4,16], %w: bf16[32,16], %b: bf16[32]) {
      %y: bf16[2,4,32] = linear(%x, %w, %b)
      %g: bf16[2,4,32] = gelu_tanh(%y)
      return(%g)
    })";
  ASSERT_TRUE(Run(linear));
  EXPECT_EQ(Product()->kind(), OpKind::kLinear);
  EXPECT_TRUE(Product()->HasAttr("epilogue"));
  // No bias, or a bias that is not a vector of the columns: cuBLASLt's epilogue does not take
  // it.
  EXPECT_FALSE(Run(R"(graph(%x: bf16[2,4,16], %w: bf16[32,16]) {
      %y: bf16[2,4,32] = linear(%x, %w)
      %g: bf16[2,4,32] = gelu_tanh(%y)
      return(%g)
    })"));
  EXPECT_FALSE(Run(R"(graph(%x: bf16[8,16], %w: bf16[16,32], %b: bf16[8,32]) {
      %y: bf16[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0}
      %g: bf16[8,32] = gelu_tanh(%y)
      return(%g)
    })"));
  // A scaled product (beta, alpha other than 1).
  EXPECT_FALSE(Run(R"(graph(%x: bf16[8,16], %w: bf16[16,32], %b: bf16[32]) {
      %y: bf16[8,32] = addmm(%b, %x, %w) {alpha=0.5, beta=1.0}
      %g: bf16[8,32] = gelu_tanh(%y)
      return(%g)
    })"));
}

// A plan of symbolic sizes (a batch B and a length T each call fixes): GPT-2's MLP as ATen
// writes it, the product of [B*T, 768] viewed back to [B, T, 3072], then gelu_new; the second
// product's bias joins the residual add after it.
TEST_F(FuseMatmulEpiloguesTest, SymbolicSizesTakeBothRewrites) {
  const std::string mlp = absl::StrReplaceAll(
      R"(graph(%x: bf16[B*T,768], %w: bf16[768,3072], %b: bf16[3072], %w2: bf16[3072,768],
               %b2: bf16[768], %r: bf16[B,T,768]) {
      %m: bf16[B*T,3072] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0}
      %y: bf16[B,T,3072] = reshape(%m) {shape=[B,T,3072]}
      CONSTANTS
      CHAIN
      %gv: bf16[B*T,3072] = reshape(%g) {shape=[B*T,3072]}
      %o: bf16[B*T,768] = addmm(%b2, %gv, %w2) {alpha=1.0, beta=1.0}
      %ov: bf16[B,T,768] = reshape(%o) {shape=[B,T,768]}
      %res: bf16[B,T,768] = add(%ov, %r)
      return(%res)
    })",
      {{"CHAIN", absl::StrReplaceAll(kPowForm, {{"DT[2,4,32]", "bf16[B,T,3072]"}})},
       {"CONSTANTS", kConstants}});
  ASSERT_TRUE(Run(mlp)) << mlp;
  int epilogues = 0, products = 0, biased_adds = 0;
  for (const auto& n : graph_->nodes()) {
    epilogues += n->HasAttr("epilogue");
    products += graph::OpCategoryOf(n->kind()) == graph::OpCategory::kMatmul;
    biased_adds += n->kind() == OpKind::kAdd && n->input(1) == graph_->input(4);
  }
  EXPECT_EQ(products, 2);
  EXPECT_EQ(epilogues, 1);
  EXPECT_EQ(biased_adds, 1) << graph::PrintGraph(*graph_);
  EXPECT_EQ(Count(OpKind::kTanh), 0);
  EXPECT_EQ(Count(OpKind::kMatmul), 1);  // the second product, without its bias
}

TEST_F(FuseMatmulEpiloguesTest, ThePipelineRunsItFirstUnlessTurnedOff) {
  for (bool on : {true, false}) {
    auto g = graph::ParseGraph(Graph(kPowForm));
    ASSERT_TRUE(g.ok());
    PipelineOptions options;
    options.verify = true;
    options.matmul_epilogues = on;
    ASSERT_TRUE(RunFusionPipeline(g->get(), options).ok());
    int groups = 0;
    bool epilogue = false;
    for (const auto& n : (*g)->nodes()) {
      groups += n->kind() == OpKind::kFusionGroup;
      epilogue = epilogue || n->HasAttr("epilogue");
    }
    EXPECT_EQ(epilogue, on);
    EXPECT_EQ(groups, on ? 0 : 1) << graph::PrintGraph(**g);
  }
}

TEST_F(FuseMatmulEpiloguesTest, TheVerifierTakesOnlyTheEpilogueOfABiasedProduct) {
  auto g = graph::ParseGraph(R"(graph(%x: bf16[8,16], %w: bf16[16,32]) {
      %y: bf16[8,32] = matmul(%x, %w) {epilogue="gelu_tanh"}
      return(%y)
    })");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(graph::VerifyGraph(**g).ok());
  auto relu = graph::ParseGraph(R"(graph(%x: bf16[8,16], %w: bf16[16,32], %b: bf16[32]) {
      %y: bf16[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0, epilogue="relu"}
      return(%y)
    })");
  ASSERT_TRUE(relu.ok());
  EXPECT_TRUE(graph::VerifyGraph(**relu).ok());
  auto silu = graph::ParseGraph(R"(graph(%x: bf16[8,16], %w: bf16[16,32], %b: bf16[32]) {
      %y: bf16[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0, epilogue="silu"}
      return(%y)
    })");
  ASSERT_TRUE(silu.ok());
  EXPECT_FALSE(graph::VerifyGraph(**silu).ok());
}

// OPT's fc1: a biased product, viewed back, read by ReLU alone.
TEST_F(FuseMatmulEpiloguesTest, AReluAfterAHalfProductBecomesItsEpilogue) {
  const std::string relu = "%g: DT[2,4,32] = relu(%y)";
  for (const std::string dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    ASSERT_TRUE(Run(Graph(relu, dtype)));
    ASSERT_NE(Product(), nullptr);
    EXPECT_EQ(Product()->kind(), OpKind::kAddmm);
    EXPECT_EQ(Product()->StringAttr("epilogue"), graph::kReluEpilogue);
    EXPECT_EQ(Count(OpKind::kRelu), 0);
    ASSERT_EQ(graph_->outputs()[0]->producer()->kind(), OpKind::kReshape);
  }
  // f32 products keep their ReLU (their bias moves into its kernel).
  Run(Graph(relu, "f32"));
  EXPECT_FALSE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kRelu), 1);
  // The product read by something else too (returned, or ReLU then exp of the product).
  EXPECT_FALSE(Run(absl::StrReplaceAll(Graph(relu), {{"return(%g)", "return(%g, %y)"}})));
  Run(absl::StrReplaceAll(Graph(relu + "\n    %e: bf16[2,4,32] = exp(%y)"),
                          {{"return(%g)", "return(%g, %e)"}}));
  EXPECT_FALSE(Product()->HasAttr("epilogue"));
  EXPECT_EQ(Count(OpKind::kRelu), 1);
  // What reads the ReLU reads the product: ReLU's result returned and read by a second product.
  ASSERT_TRUE(Run(R"(graph(%x: bf16[8,16], %w: bf16[16,32], %b: bf16[32], %w2: bf16[32,4]) {
      %y: bf16[8,32] = addmm(%b, %x, %w) {alpha=1.0, beta=1.0}
      %r: bf16[8,32] = relu(%y)
      %o: bf16[8,4] = matmul(%r, %w2)
      return(%o, %r)
    })"));
  EXPECT_EQ(Count(OpKind::kRelu), 0);
  const graph::Node* p = graph_->outputs()[1]->producer();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->kind(), OpKind::kAddmm);
  EXPECT_EQ(p->StringAttr("epilogue"), graph::kReluEpilogue);
  EXPECT_EQ(graph_->outputs()[0]->producer()->input(0), graph_->outputs()[1]);
}

}  // namespace
}  // namespace torchfuse::fusion
