// The torchfuse IR: a Graph owns Nodes, each Node owns its output Values.
#ifndef TORCHFUSE_GRAPH_GRAPH_H_
#define TORCHFUSE_GRAPH_GRAPH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/dtype.h"
#include "graph/op.h"

namespace torchfuse::graph {

/// Symbolic sizes. A dim is a size (>= 0) or a symbol: a named size that each call fixes (a
/// sequence length, a batch), encoded as a negative integer below every size and below the
/// -1 of reshape targets. A name is one symbol in the whole process, so dims of one symbol
/// are equal in every call; dims of different symbols are not assumed equal.
int64_t SymbolicDim(absl::string_view name);
/// A symbol of its own, named "s0", "s1", ... (the `?` of a spec).
int64_t FreshSymbolicDim();
bool IsSymbolic(int64_t dim);
/// a * b. A product with a symbol is a symbol too ("4*T", "B*T", named by its factors), whose
/// value each call derives from its factors' (a view joining a batch and a length).
int64_t MultiplyDims(int64_t a, int64_t b);
/// The product of `sizes` (a tensor's element count), a symbol where a size is one.
int64_t ProductOfDims(const std::vector<int64_t>& sizes);
/// a / b where it divides exactly for every value of the symbols (8*T / 4 = 2*T, B*T / B =
/// T); nullopt where not (T / 2, B / T).
std::optional<int64_t> DivideDims(int64_t a, int64_t b);
/// The symbols a dim is a product of, with repeats (T*T: T twice); none for a size.
std::vector<int64_t> SymbolFactors(int64_t dim);
/// "1024", "T", "4*T" (a product of sizes and names) or "?" (a fresh symbol).
absl::StatusOr<int64_t> ParseDim(absl::string_view text);
/// "T" for a symbol, "1024" for a size.
std::string DimName(int64_t dim);
/// "[B,T,768]".
std::string DimsToString(const std::vector<int64_t>& sizes);
/// True when no dim is a symbol.
bool AllStatic(const std::vector<int64_t>& sizes);

/// The sizes of the symbols in one call.
class SymbolBinding {
 public:
  /// Binds the symbols of `sizes` to the dims of `actual`: sizes must match, a symbol takes
  /// the same value everywhere, and a symbol's value is at least 1 (a zero-size call runs a
  /// graph of its own). The message says what differs.
  absl::Status Bind(const std::vector<int64_t>& sizes, const std::vector<int64_t>& actual);
  /// `sizes` with each bound symbol replaced by its value; unbound ones stay.
  std::vector<int64_t> Apply(const std::vector<int64_t>& sizes) const;
  int64_t Apply(int64_t dim) const;
  bool empty() const { return values_.empty(); }
  const std::map<int64_t, int64_t>& values() const { return values_; }

 private:
  std::map<int64_t, int64_t> values_;
};

/// A tensor's element type and sizes (rank 0 = scalar tensor); a size may be a symbol.
struct TensorType {
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// Product of the sizes (1 for rank 0), -1 when a dim is a symbol.
  int64_t numel() const;
  bool is_static() const { return AllStatic(sizes); }
  /// Text form, "f32[8,1024]", "bf16[B,T,768]".
  std::string ToString() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && sizes == o.sizes; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

/// True when some dim of some type is a symbol.
bool AnySymbolic(const std::vector<TensorType>& types);

/// Parses "f32[8,1024]", "bf16[B,T,768]" (a name is a symbol, `?` a fresh one) or "bf16[]";
/// the message names the bad part.
absl::StatusOr<TensorType> ParseTensorType(absl::string_view text);

/// A tensor known when a graph is built (a weight), with its type: either its bytes
/// (contiguous, row-major), or `held`, the frontend's own handle on the tensor itself (kept
/// without a copy; graph/ never reads it).
struct TensorData {
  TensorType type;
  std::vector<uint8_t> bytes;
  std::shared_ptr<const void> held;
};

/// Attribute values: int, float, string, int list.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
/// Attributes, sorted by name so that printing is deterministic.
using Attrs = std::map<std::string, AttrValue>;

class Node;
class Graph;

/// An SSA value: a graph input or a node output.
class Value {
 public:
  const TensorType& type() const { return type_; }
  void set_type(TensorType t) { type_ = std::move(t); }
  /// The node that defines this value, or nullptr for a graph input.
  Node* producer() const { return producer_; }
  /// Index among the producer's outputs (or among the graph inputs).
  int index() const { return index_; }
  /// Nodes that use this value, once per use, in no promised order.
  const std::vector<Node*>& uses() const { return uses_; }
  /// Optional name from the source program ("x", "fc1.weight"); printed as a comment only.
  const std::string& debug_name() const { return debug_name_; }
  void set_debug_name(std::string n) { debug_name_ = std::move(n); }

 private:
  friend class Graph;
  friend class Node;
  Value(Node* producer, int index, TensorType type)
      : producer_(producer), index_(index), type_(std::move(type)) {}
  Node* producer_;
  int index_;
  TensorType type_;
  std::vector<Node*> uses_;
  std::string debug_name_;
};

/// One operation. Owns its outputs (and, for a fusion group, its body).
class Node {
 public:
  OpKind kind() const { return kind_; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  Value* input(int i) const { return inputs_[i]; }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  Value* output(int i = 0) const { return outputs_[i].get(); }
  const Attrs& attrs() const { return attrs_; }
  Attrs& mutable_attrs() { return attrs_; }
  bool HasAttr(const std::string& name) const { return attrs_.count(name) > 0; }
  /// Typed attribute access; a missing or mistyped attribute is an internal error.
  int64_t IntAttr(const std::string& name) const;
  double FloatAttr(const std::string& name) const;
  const std::string& StringAttr(const std::string& name) const;
  const std::vector<int64_t>& IntsAttr(const std::string& name) const;
  /// Int or float attribute as a double (scalar constants may hold either).
  double NumberAttr(const std::string& name) const;
  /// Captured tensor of a param node (may be null for graphs parsed from text).
  const std::shared_ptr<const TensorData>& data() const { return data_; }
  void set_data(std::shared_ptr<const TensorData> d) { data_ = std::move(d); }
  /// Body of a fusion group; its inputs correspond to this node's inputs, its outputs to
  /// this node's outputs.
  Graph* body() const { return body_.get(); }
  Graph* owning_graph() const { return graph_; }
  /// Where the node came from ("aten::tanh"), for reports; not part of the text form.
  const std::string& source() const { return source_; }
  void set_source(std::string s) { source_ = std::move(s); }
  /// Replaces input `i`, keeping use lists right.
  void ReplaceInput(int i, Value* v);

 private:
  friend class Graph;
  Node(Graph* g, OpKind kind) : graph_(g), kind_(kind) {}
  Graph* graph_;
  OpKind kind_;
  std::vector<Value*> inputs_;
  std::vector<std::unique_ptr<Value>> outputs_;
  Attrs attrs_;
  std::shared_ptr<const TensorData> data_;
  std::unique_ptr<Graph> body_;
  std::string source_;
};

/// A dataflow graph. Nodes are kept in a topological order (definition before use).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Adds a graph input.
  Value* AddInput(TensorType type, std::string debug_name = "");
  const std::vector<std::unique_ptr<Value>>& inputs() const { return inputs_; }
  Value* input(int i) const { return inputs_[i].get(); }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }

  /// Appends a node whose output types are given.
  Node* AppendNode(OpKind kind, std::vector<Value*> inputs, Attrs attrs,
                   std::vector<TensorType> output_types);
  /// Appends a node and infers its single output's type; the error names op and operand types.
  absl::StatusOr<Node*> Append(OpKind kind, std::vector<Value*> inputs, Attrs attrs = {});
  /// Inserts a node before `before` (nullptr = at the end) with given output types.
  Node* InsertNodeBefore(Node* before, OpKind kind, std::vector<Value*> inputs, Attrs attrs,
                         std::vector<TensorType> output_types);
  /// Gives a fusion group its body.
  void SetBody(Node* node, std::unique_ptr<Graph> body);
  /// Appends a scalar constant (wrapped = a Python number, as ATen's wrapped scalars).
  Node* AppendConstant(double value, DType dtype, bool wrapped);

  /// Nodes in order.
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  /// Position of `node` in nodes().
  int IndexOf(const Node* node) const;

  /// Marks a graph output.
  void AddOutput(Value* v) { outputs_.push_back(v); }
  const std::vector<Value*>& outputs() const { return outputs_; }
  /// Whether `v` is one of the graph outputs.
  bool IsOutput(const Value* v) const;
  void SetOutput(int i, Value* v) { outputs_[i] = v; }

  /// Points every use of `from` (and graph outputs) at `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);
  /// Removes a node whose outputs have no uses and are not graph outputs.
  void RemoveNode(Node* node);
  /// Removes nodes whose outputs are unused (except opaque nodes, which may have effects).
  int RemoveDeadNodes();
  /// Reorders nodes so that each comes after its operands' producers, keeping the current
  /// order wherever it is already valid (stable).
  void SortTopologically();

 private:
  std::vector<std::unique_ptr<Value>> inputs_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> outputs_;
};

/// Whether `n` is an opaque node of one of ATen's attention ops: scaled_dot_product_attention
/// or one of its fused forms (flash, memory-efficient, cuDNN).
bool IsAttentionOp(const Node& n);

/// For each node of `g`, in order, the values an interpreter may drop once that node has run:
/// node inputs it reads last and outputs it makes that no node reads, graph outputs excepted.
std::vector<std::vector<const Value*>> DeadAfter(const Graph& g);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_GRAPH_H_
