#include "graph/printer.h"

#include <gtest/gtest.h>

#include "graph/parser.h"

namespace torchfuse::graph {
namespace {

TEST(PrinterTest, PrintsNumberedValuesAndSortedAttrs) {
  Graph g;
  Value* x = g.AddInput({DType::kF32, {8, 16}});
  Node* c = g.AppendConstant(0.5, DType::kF64, true);
  Node* m = *g.Append(OpKind::kMul, {x, c->output()});
  Node* s = *g.Append(OpKind::kSum, {m->output()},
                      {{"keepdim", int64_t{1}}, {"dims", std::vector<int64_t>{-1}}});
  g.AddOutput(s->output());
  EXPECT_EQ(PrintGraph(g),
            "graph(%0: f32[8,16]) {\n"
            "  %1: f64[] = constant() {dtype=\"f64\", value=0.5, wrapped=1}\n"
            "  %2: f32[8,16] = mul(%0, %1)\n"
            "  %3: f32[8,1] = sum(%2) {dims=[-1], keepdim=1}\n"
            "  return(%3)\n"
            "}\n");
}

TEST(PrinterTest, FloatsKeepTheirKind) {
  EXPECT_EQ(PrintAttrValue(AttrValue(2.0)), "2.0");
  EXPECT_EQ(PrintAttrValue(AttrValue(int64_t{2})), "2");
  EXPECT_EQ(PrintAttrValue(AttrValue(1e-5)), "1.0000000000000001e-05");
  EXPECT_EQ(PrintAttrValue(AttrValue(-1.0 / 0.0)), "-inf");
  EXPECT_EQ(PrintAttrValue(AttrValue(std::string("a\"b"))), "\"a\\\"b\"");
}

TEST(PrinterTest, RoundTripsFusionGroupsAndMultipleOutputs) {
  const char* text =
      "graph(%0: f32[4,8], %1: f32[8]) {\n"
      "  %2: f32[4,8], %3: i64[4,8] = opaque(%0) {handle=0, target=\"aten::sort\"}\n"
      "  %4: f32[4,8] = fusion_group(%2, %1) {name=\"tf_add\"} graph(%5: f32[4,8], %6: f32[8]) {\n"
      "    %7: f32[4,8] = add(%5, %6)\n"
      "    return(%7)\n"
      "  }\n"
      "  return(%4, %3)\n"
      "}\n";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(PrintGraph(**g), text);
}

}  // namespace
}  // namespace torchfuse::graph
