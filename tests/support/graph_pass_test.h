// A fixture for the tests of one graph pass: a graph's text parsed, the pass run on it, the
// result verified.
#ifndef TORCHFUSE_TESTS_SUPPORT_GRAPH_PASS_TEST_H_
#define TORCHFUSE_TESTS_SUPPORT_GRAPH_PASS_TEST_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/op.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::test_support {

class GraphPassTest : public ::testing::Test {
 protected:
  using Pass = absl::StatusOr<bool> (*)(graph::Graph*);
  explicit GraphPassTest(Pass pass) : pass_(pass) {}

  // Runs the pass on `text` (the result in graph_); returns whether it changed the graph.
  bool Run(const std::string& text) {
    auto g = graph::ParseGraph(text);
    EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
    if (!g.ok()) return false;
    graph_ = *std::move(g);
    absl::StatusOr<bool> changed = pass_(graph_.get());
    EXPECT_TRUE(changed.ok()) << changed.status();
    absl::Status valid = graph::VerifyGraph(*graph_);
    EXPECT_TRUE(valid.ok()) << valid << "\n" << graph::PrintGraph(*graph_);
    return changed.ok() && *changed;
  }

  // Nodes of `kind` in graph_.
  int Count(graph::OpKind kind) const {
    int n = 0;
    for (const auto& node : graph_->nodes()) n += node->kind() == kind;
    return n;
  }

  std::unique_ptr<graph::Graph> graph_;

 private:
  const Pass pass_;
};

}  // namespace torchfuse::test_support

#endif  // TORCHFUSE_TESTS_SUPPORT_GRAPH_PASS_TEST_H_
