#include "graph/verifier.h"

#include <gtest/gtest.h>

#include "graph/parser.h"

namespace torchfuse::graph {
namespace {

absl::Status VerifyText(const char* text) {
  auto g = ParseGraph(text);
  if (!g.ok()) return g.status();
  return VerifyGraph(**g);
}

TEST(VerifierTest, AcceptsWellFormedGraph) {
  EXPECT_TRUE(VerifyText(R"(graph(%x: f32[8,16], %w: f32[16]) {
      %c: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %m: f32[8,16] = mul(%x, %c)
      %a: f32[8,16] = add(%m, %w)
      %s: f32[8,1] = amax(%a) {dims=[-1], keepdim=1}
      %d: f32[8,16] = sub(%a, %s)
      return(%d)
    })").ok());
}

TEST(VerifierTest, RejectsWrongOutputType) {
  absl::Status s = VerifyText(R"(graph(%x: f32[8,16]) {
      %y: f32[8,16] = sum(%x) {dims=[-1], keepdim=1}
      return(%y)
    })");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("f32[8,1]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("sum"), std::string::npos);
}

TEST(VerifierTest, RejectsWrongDtype) {
  EXPECT_FALSE(VerifyText(R"(graph(%x: bf16[4]) {
      %y: f32[4] = exp(%x)
      return(%y)
    })").ok());
}

TEST(VerifierTest, RejectsBadArity) {
  EXPECT_FALSE(VerifyText(R"(graph(%x: f32[4]) {
      %y: f32[4] = add(%x)
      return(%y)
    })").ok());
}

TEST(VerifierTest, RejectsOperandFromAnotherGraph) {
  // A fusion body may only see its own inputs.
  absl::Status s = VerifyText(R"(graph(%x: f32[4]) {
      %y: f32[4] = fusion_group(%x) graph(%p: f32[4]) {
        %q: f32[4] = exp(%x)
        return(%q)
      }
      return(%y)
    })");
  EXPECT_FALSE(s.ok());
}

TEST(VerifierTest, RejectsFusionBodyMismatch) {
  absl::Status s = VerifyText(R"(graph(%x: f32[4]) {
      %y: f32[4] = fusion_group(%x) graph(%p: f32[5]) {
        %q: f32[5] = exp(%p)
        return(%q)
      }
      return(%y)
    })");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("body input 0"), std::string::npos);
}

TEST(VerifierTest, RejectsUseBeforeDefinition) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {4}});
  Node* a = *g.Append(OpKind::kExp, {x});
  Node* b = *g.Append(OpKind::kNeg, {x});
  a->ReplaceInput(0, b->output());  // now a uses a value defined after it: a cycle in order
  g.AddOutput(a->output());
  absl::Status s = VerifyGraph(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not defined before use"), std::string::npos);
}

TEST(VerifierTest, RequiresOpaqueTargetAndParamName) {
  EXPECT_FALSE(VerifyText(R"(graph(%x: f32[4]) {
      %y: f32[4] = opaque(%x)
      return(%y)
    })").ok());
  EXPECT_FALSE(VerifyText(R"(graph(%x: f32[4]) {
      %w: f32[4] = param()
      return(%w)
    })").ok());
}

}  // namespace
}  // namespace torchfuse::graph
