#include "graph/parser.h"

#include <cmath>

#include <gtest/gtest.h>

#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::graph {
namespace {

TEST(ParserTest, AcceptsNamedValuesAndComments) {
  auto g = ParseGraph(R"(
    graph(%x: bf16[8,1024], %b: bf16[1024]) {
      # bias + gelu
      %y: bf16[8,1024] = add(%x, %b)
      %z: bf16[8,1024] = gelu_tanh(%y)
      return(%z)
    })");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->nodes().size(), 2u);
  EXPECT_EQ((*g)->nodes()[1]->kind(), OpKind::kGeluTanh);
  EXPECT_TRUE(VerifyGraph(**g).ok());
}

TEST(ParserTest, RoundTripsEveryAttrKind) {
  const char* text =
      "graph(%0: f32[2,3]) {\n"
      "  %1: f32[2,3] = clamp(%0) {max=inf, min=-0.25}\n"
      "  %2: f32[3,2] = reshape(%1) {shape=[3,-1]}\n"
      "  %3: f32[3,2] = layer_norm(%2) {eps=1.0000000000000001e-05, normalized_ndim=1}\n"
      "  %4: i64[] = constant() {dtype=\"i64\", value=-7}\n"
      "  return(%3, %4)\n"
      "}\n";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(**g), text);
  EXPECT_TRUE(std::isinf((*g)->nodes()[0]->FloatAttr("max")));
  EXPECT_EQ((*g)->nodes()[3]->IntAttr("value"), -7);
}

// A slice of a static dim that ends at a dynamic size (a mask buffer cut to the sequence
// length) prints its end by name and reads back; its result has that size.
TEST(ParserTest, RoundTripsASliceThatEndsAtASymbol) {
  const char* text =
      "graph(%0: bool[256,256], %1: f32[B,T]) {\n"
      "  %2: bool[T,256] = slice(%0) {dim=0, end=T, start=0, step=1}\n"
      "  %3: bool[T,256] = logical_not(%2)\n"
      "  return(%3)\n"
      "}\n";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(**g), text);
  EXPECT_TRUE(VerifyGraph(**g).ok()) << VerifyGraph(**g);
  EXPECT_EQ((*g)->nodes()[0]->IntAttr("end"), SymbolicDim("T"));
  // Only x[:T]: another start or step has no size the types can say.
  auto bad = ParseGraph(
      "graph(%0: bool[256,256]) {\n"
      "  %1: bool[T,256] = slice(%0) {dim=0, end=T, start=1, step=1}\n"
      "  return(%1)\n"
      "}\n");
  EXPECT_FALSE(bad.ok() && VerifyGraph(**bad).ok());
}

TEST(ParserTest, ReportsUndefinedValuesWithLine) {
  auto g = ParseGraph("graph(%x: f32[4]) {\n  %y: f32[4] = exp(%q)\n  return(%y)\n}\n");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("line 2"), std::string::npos);
  EXPECT_NE(g.status().message().find("%q"), std::string::npos);
}

TEST(ParserTest, RejectsUnknownOpsAndBadTypes) {
  EXPECT_FALSE(ParseGraph("graph(%x: f32[4]) {\n %y: f32[4] = frobnicate(%x)\n return(%y)\n}").ok());
  EXPECT_FALSE(ParseGraph("graph(%x: f99[4]) {\n return(%x)\n}").ok());
  EXPECT_FALSE(ParseGraph("graph(%x: f32[4]) {\n %x: f32[4] = exp(%x)\n return(%x)\n}").ok());
  EXPECT_FALSE(ParseGraph("graph(%x: f32[4]) {\n return(%x)\n} extra").ok());
}

}  // namespace
}  // namespace torchfuse::graph
