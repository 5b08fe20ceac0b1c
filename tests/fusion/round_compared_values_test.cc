#include "fusion/round_compared_values.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using graph::Graph;
using graph::Node;
using graph::OpKind;

std::unique_ptr<Graph> Parse(const std::string& text) {
  auto g = graph::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

std::vector<const Node*> Groups(const Graph& g) {
  std::vector<const Node*> groups;
  for (const auto& n : g.nodes()) {
    if (n->kind() == OpKind::kFusionGroup) groups.push_back(n.get());
  }
  return groups;
}

// Rounding casts in a body, and which ops they follow.
std::vector<std::string> RoundedOps(const Node& group) {
  std::vector<std::string> ops;
  for (const auto& n : group.body()->nodes()) {
    if (n->kind() != OpKind::kCast || !n->HasAttr("rounds")) continue;
    EXPECT_EQ(n->output()->type().dtype, n->input(0)->type().dtype);
    ops.push_back(graph::OpName(n->input(0)->producer()->kind()));
  }
  return ops;
}

// A value stored by the first kernel (exp, mul, then a matmul reads it) that the second
// compares: eager compares it rounded at every step, so the first kernel computes it so.
std::string TwoKernels(const char* dtype, const char* compare) {
  return absl::StrCat(R"(graph(%x: )", dtype, R"([64,32], %w: )", dtype, R"([32,32]) {
      %c: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
      %a: )", dtype, R"([64,32] = exp(%x)
      %b: )", dtype, R"([64,32] = mul(%a, %c)
      %m: )", dtype, R"([64,32] = matmul(%b, %w)
      %n: )", dtype, R"([64,32] = neg(%m)
      %k: bool[64,32] = )", compare, R"((%b, %n)
      %r: )", dtype, R"([64,32] = where(%k, %b, %n)
      return(%r)
    })");
}

TEST(RoundComparedValuesTest, ValuesAComparisonReadsFromAnotherKernelAreRoundedThere) {
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    std::unique_ptr<Graph> g = Parse(TwoKernels(dtype, "gt"));
    ASSERT_TRUE(RunFusionPipeline(g.get()).ok());
    ASSERT_TRUE(graph::VerifyGraph(*g).ok()) << graph::PrintGraph(*g);
    std::vector<const Node*> groups = Groups(*g);
    ASSERT_EQ(groups.size(), 2u) << graph::PrintGraph(*g);
    // The first kernel rounds exp's and mul's results; the second (whose comparison the code
    // generator rounds) has no casts added, and neither has the matmul's side.
    EXPECT_EQ(RoundedOps(*groups[0]), (std::vector<std::string>{"exp", "mul"}))
        << graph::PrintGraph(*g);
    EXPECT_TRUE(RoundedOps(*groups[1]).empty()) << graph::PrintGraph(*g);
    // Running the pass again adds nothing.
    auto again = RoundComparedValues(g.get());
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(*again);
  }
}

TEST(RoundComparedValuesTest, KernelsOfF32ComparisonsAndOfNoComparisonAreUnchanged) {
  for (const char* compare : std::initializer_list<const char*>{"gt", nullptr}) {
    std::string text = TwoKernels(compare ? "f32" : "bf16", compare ? compare : "gt");
    if (compare == nullptr) {
      // No comparison: where's condition is a bool input.
      text = R"(graph(%x: bf16[64,32], %w: bf16[32,32], %k: bool[64,32]) {
          %a: bf16[64,32] = exp(%x)
          %m: bf16[64,32] = matmul(%a, %w)
          %r: bf16[64,32] = where(%k, %a, %m)
          return(%r)
        })";
    }
    std::unique_ptr<Graph> g = Parse(text);
    ASSERT_TRUE(RunFusionPipeline(g.get()).ok());
    for (const Node* group : Groups(*g)) {
      EXPECT_TRUE(RoundedOps(*group).empty()) << graph::PrintGraph(*g);
    }
  }
}

}  // namespace
}  // namespace torchfuse::fusion
