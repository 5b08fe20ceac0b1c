// Reads the text form written by PrintGraph.
#ifndef TORCHFUSE_GRAPH_PARSER_H_
#define TORCHFUSE_GRAPH_PARSER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace torchfuse::graph {

/// Parses a graph. Value names are any identifiers after '%', scoped to their graph body.
/// Output types are taken as written (run VerifyGraph to check them). Errors give the line.
absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_PARSER_H_
