#include "fusion/fuse_column_reductions.h"

#include <algorithm>
#include <set>
#include <string>

#include "fusion/fuse_elementwise.h"
#include "fusion/group_builder.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

class ColumnFuser {
 public:
  explicit ColumnFuser(Graph* g) : g_(g), order_(*g) {}

  absl::StatusOr<bool> Run() {
    std::vector<std::set<Node*>> groups;
    std::set<Node*> assigned;
    for (const auto& node : g_->nodes()) {
      Node* seed = node.get();
      if (!IsColumnReduction(*seed) || assigned.count(seed)) continue;
      domain_ = seed->input(0)->type().sizes;
      dims_ = *graph::ReductionDims(seed->attrs(), static_cast<int64_t>(domain_.size()));
      kept_.clear();
      kept1_ = domain_;
      for (size_t d = 0; d < domain_.size(); ++d) {
        if (std::find(dims_.begin(), dims_.end(), static_cast<int64_t>(d)) == dims_.end()) {
          kept_.push_back(domain_[d]);
        } else {
          kept1_[d] = 1;
        }
      }
      // Reductions of the same value join one group: it is read once.
      std::set<Node*> members = GrowGroup(
          seed, order_, assigned, [](const Node& u) { return IsColumnReduction(u); },
          [this](const Node& n, const std::set<Node*>& merged) {
            return Joinable(n) &&
                   (!order_.UsedOutside(&n, merged) || Storable(n.output()->type().sizes)) &&
                   Consistent(merged);
          });
      for (Node* m : members) assigned.insert(m);
      groups.push_back(std::move(members));
    }
    if (groups.empty()) return false;
    for (const std::set<Node*>& members : groups) {
      std::vector<Node*> ordered = order_.Sorted(members);
      BuildFusionGroup(g_, ordered, "column_" + FirstOpNames(ordered));
    }
    g_->SortTopologically();
    g_->RemoveDeadNodes();
    return true;
  }

 private:
  bool ColumnShaped(const std::vector<int64_t>& s) const { return s == kept_ || s == kept1_; }

  // Shapes a group can write: the domain, or one value per column.
  bool Storable(const std::vector<int64_t>& s) const { return s == domain_ || ColumnShaped(s); }

  bool Joinable(const Node& n) const {
    if (IsColumnReduction(n)) {
      return n.input(0)->type().sizes == domain_ &&
             *graph::ReductionDims(n.attrs(), static_cast<int64_t>(domain_.size())) == dims_;
    }
    // A cat selects by the index along its dim: elementwise kernels only.
    if (!IsElementwiseFusible(n) || n.kind() == OpKind::kConstant || n.kind() == OpKind::kCat) {
      return false;
    }
    for (int i = 0; i < n.num_outputs(); ++i) {
      const std::vector<int64_t>& s = n.output(i)->type().sizes;
      if (!BroadcastsInto(s, domain_) && !ColumnShaped(s)) return false;
    }
    return true;
  }

  // Every member after a reduction (reading a reduced value, directly or not) has a column
  // shape; every member before has a value that broadcasts into the domain.
  bool Consistent(const std::set<Node*>& members) const {
    std::set<const Node*> after;
    for (Node* n : order_.Sorted(members)) {
      bool depends = false;
      for (const Value* in : n->inputs()) {
        const Node* p = in->producer();
        depends |= p != nullptr && members.count(const_cast<Node*>(p)) &&
                   (graph::IsOnePassReduction(p->kind()) || after.count(p));
      }
      if (graph::IsOnePassReduction(n->kind())) {
        if (depends) return false;  // a reduction of a reduced value: a second pass
        continue;
      }
      if (depends) {
        after.insert(n);
        if (!ColumnShaped(n->output()->type().sizes)) return false;
      } else if (!BroadcastsInto(n->output()->type().sizes, domain_)) {
        return false;
      }
    }
    return true;
  }

  Graph* g_;
  NodeOrder order_;
  std::vector<int64_t> domain_;
  std::vector<int64_t> dims_;   // reduced, ascending
  std::vector<int64_t> kept_;   // the result shape without keepdim
  std::vector<int64_t> kept1_;  // with keepdim
};

}  // namespace

bool IsColumnReduction(const Node& node) {
  if (!graph::IsOnePassReduction(node.kind())) return false;
  const graph::TensorType& t = node.input(0)->type();
  // No column kernel for empty tensors: torch reduces them (to eager's 0, NaN or error).
  if (t.rank() < 2 || !graph::IsFloating(t.dtype) || t.numel() == 0) return false;
  auto dims = graph::ReductionDims(node.attrs(), t.rank());
  return dims.ok() && !dims->empty() &&
         std::find(dims->begin(), dims->end(), t.rank() - 1) == dims->end();
}

absl::StatusOr<bool> FuseColumnReductions(Graph* graph) { return ColumnFuser(graph).Run(); }

}  // namespace torchfuse::fusion
