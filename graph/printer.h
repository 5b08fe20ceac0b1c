// Text form of the IR. ParseGraph (parser.h) reads what PrintGraph writes.
#ifndef TORCHFUSE_GRAPH_PRINTER_H_
#define TORCHFUSE_GRAPH_PRINTER_H_

#include <string>

#include "graph/graph.h"

namespace torchfuse::graph {

/// Prints `graph` as text. Values are numbered in definition order (%0, %1, ...), so the same
/// graph always prints the same bytes. Example:
///   graph(%0: f32[8,1024]) {
///     %1: f64[] = constant() {dtype="f64", value=0.5, wrapped=1}
///     %2: f32[8,1024] = mul(%0, %1)
///     return(%2)
///   }
std::string PrintGraph(const Graph& graph);

/// Prints one attribute value as it appears in the text form.
std::string PrintAttrValue(const AttrValue& value);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_PRINTER_H_
