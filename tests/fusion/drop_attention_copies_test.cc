#include "fusion/drop_attention_copies.h"

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

// OPT's attention: query, key and value split into heads as [B, T, H, D] viewed as
// [B, H, T, D]; the key and value copied contiguous (`KCOPY`, `VCOPY` name what the attention
// reads), the query handed over as the view.
constexpr char kAttention[] = R"(graph(%q: bf16[2,16,64], %k: bf16[2,16,64], %v: bf16[2,16,64]) {
    %qh: bf16[2,16,4,16] = reshape(%q) {shape=[2,16,4,16]}
    %qt: bf16[2,4,16,16] = permute(%qh) {dims=[0,2,1,3]}
    %kh: bf16[2,16,4,16] = reshape(%k) {shape=[2,16,4,16]}
    %kt: bf16[2,4,16,16] = permute(%kh) {dims=[0,2,1,3]}
    %kc: bf16[2,4,16,16] = contiguous(%kt)
    %vh: bf16[2,16,4,16] = reshape(%v) {shape=[2,16,4,16]}
    %vt: bf16[2,4,16,16] = permute(%vh) {dims=[0,2,1,3]}
    %vc: bf16[2,4,16,16] = contiguous(%vt)
    %o: bf16[2,4,16,16] = opaque(%qt, KCOPY, VCOPY) {handle=0, target="TARGET"}
    return(%o OUTPUTS)
  })";

std::string Attention(const std::string& target = "aten::_scaled_dot_product_cudnn_attention",
                      const std::string& outputs = "", const std::string& k = "%kc",
                      const std::string& v = "%vc") {
  return absl::StrReplaceAll(kAttention, {{"TARGET", target}, {"OUTPUTS", outputs},
                                          {"KCOPY", k}, {"VCOPY", v}});
}

class DropCopiesIntoAttentionTest : public test_support::GraphPassTest {
 protected:
  DropCopiesIntoAttentionTest() : GraphPassTest(&DropCopiesIntoAttention) {}

  int Copies() const { return Count(OpKind::kContiguous); }

  const graph::Node* AttentionNode() const {
    for (const auto& node : graph_->nodes()) {
      if (node->kind() == OpKind::kOpaque) return node.get();
    }
    return nullptr;
  }
};

TEST_F(DropCopiesIntoAttentionTest, KeyAndValueCopiesGoForEveryAttentionOp) {
  for (const std::string target :
       {"aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention", "aten::scaled_dot_product_attention"}) {
    SCOPED_TRACE(target);
    ASSERT_TRUE(Run(Attention(target)));
    EXPECT_EQ(Copies(), 0) << graph::PrintGraph(*graph_);
    const graph::Node* a = AttentionNode();
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->input(1)->producer()->kind(), OpKind::kPermute);
    EXPECT_EQ(a->input(2)->producer()->kind(), OpKind::kPermute);
  }
  // Through the pipeline: no kernel is left (the copies were the only work but the attention).
  auto g = graph::ParseGraph(Attention());
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(RunFusionPipeline(g->get(), PipelineOptions{true, nullptr}).ok());
  for (const auto& n : (*g)->nodes()) {
    EXPECT_NE(n->kind(), OpKind::kFusionGroup) << graph::PrintGraph(**g);
  }
}

TEST_F(DropCopiesIntoAttentionTest, CopiesReadOtherwiseStay) {
  // The copied key is also returned (a cache of keys, or saved for a backward pass).
  EXPECT_TRUE(Run(Attention("aten::_scaled_dot_product_cudnn_attention", ", %kc")));
  EXPECT_EQ(Copies(), 1);
  EXPECT_EQ(AttentionNode()->input(1)->producer()->kind(), OpKind::kContiguous);
  EXPECT_EQ(AttentionNode()->input(2)->producer()->kind(), OpKind::kPermute);
  // Another op than attention reads the copies.
  EXPECT_FALSE(Run(Attention("aten::cumsum")));
  EXPECT_EQ(Copies(), 2);
  // A copy read as something else than query, key or value (a mask, the fourth operand).
  EXPECT_FALSE(Run(R"(graph(%q: bf16[2,4,16,16], %m: bf16[2,16,4,16]) {
      %mt: bf16[2,4,16,16] = permute(%m) {dims=[0,2,1,3]}
      %mc: bf16[2,4,16,16] = contiguous(%mt)
      %o: bf16[2,4,16,16] = opaque(%q, %q, %q, %mc) {handle=0, target="aten::_scaled_dot_product_efficient_attention"}
      return(%o)
    })"));
  EXPECT_EQ(Copies(), 1);
}

}  // namespace
}  // namespace torchfuse::fusion
