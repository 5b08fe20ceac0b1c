#include "fusion/pipeline.h"

#include <gtest/gtest.h>

#include "graph/parser.h"

namespace torchfuse::fusion {
namespace {

TEST(PipelineTest, TracesEachPassAndVerifies) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4]) {
      %a: f32[4] = exp(%x)
      %b: f32[4] = neg(%a)
      return(%b)
    })");
  ASSERT_TRUE(g.ok());
  std::string trace;
  PipelineOptions options;
  options.verify = true;
  options.trace = &trace;
  ASSERT_TRUE(RunFusionPipeline(g->get(), options).ok());
  EXPECT_NE(trace.find("after fuse_elementwise:"), std::string::npos) << trace;
  EXPECT_NE(trace.find("fusion_group"), std::string::npos);
}

TEST(PipelineTest, ReportsNoChangeWhenNothingFuses) {
  auto g = graph::ParseGraph(R"(graph(%x: f32[4,4]) {
      %m: f32[4,4] = matmul(%x, %x)
      return(%m)
    })");
  ASSERT_TRUE(g.ok());
  std::string trace;
  PipelineOptions options;
  options.trace = &trace;
  ASSERT_TRUE(RunFusionPipeline(g->get(), options).ok());
  EXPECT_NE(trace.find("(no change)"), std::string::npos);
}

}  // namespace
}  // namespace torchfuse::fusion
