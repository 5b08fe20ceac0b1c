#include "fusion/fuse_row_reductions.h"

#include <algorithm>
#include <set>
#include <string>

#include "common/status_macros.h"
#include "fusion/fuse_elementwise.h"
#include "fusion/group_builder.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

class RowFuser {
 public:
  explicit RowFuser(Graph* g) : g_(g), order_(*g) {}

  absl::StatusOr<bool> Run() {
    std::vector<std::set<Node*>> groups;
    std::set<Node*> assigned;
    for (const auto& node : g_->nodes()) {
      Node* seed = node.get();
      if (!IsRowReduction(*seed) || assigned.count(seed)) continue;
      domain_ = seed->input(0)->type().sizes;
      outer_.assign(domain_.begin(), domain_.end() - 1);
      std::set<Node*> members = GrowGroup(
          seed, order_, assigned, [](const Node&) { return false; },
          [this](const Node& n, const std::set<Node*>& merged) {
            return Joinable(n, merged) && (!order_.UsedOutside(&n, merged) ||
                                           Storable(n.output()->type().sizes));
          });
      for (Node* m : members) assigned.insert(m);
      groups.push_back(std::move(members));
    }
    if (groups.empty()) return false;
    for (const std::set<Node*>& members : groups) {
      std::vector<Node*> ordered = order_.Sorted(members);
      BuildFusionGroup(g_, ordered, GroupName(ordered));
    }
    g_->SortTopologically();
    g_->RemoveDeadNodes();
    return true;
  }

 private:
  bool Joinable(const Node& n, const std::set<Node*>& merged) const {
    if (IsRowReduction(n)) return n.input(0)->type().sizes == domain_;
    // A cat selects by the index along its dim: elementwise kernels only.
    if (!IsElementwiseFusible(n) || n.kind() == OpKind::kConstant || n.kind() == OpKind::kCat) {
      return false;
    }
    for (int i = 0; i < n.num_outputs(); ++i) {
      const std::vector<int64_t>& s = n.output(i)->type().sizes;
      if (BroadcastsInto(s, domain_) || s == outer_) continue;
      if (!PermutesDomain(s) || !FeedsAPermuteInto(n, merged)) return false;
    }
    return true;
  }

  // A value whose dims are the domain's in another order, as a layer norm over channels-last
  // activations reads `conv(x) + bias` through permute(0, 2, 3, 1).
  bool PermutesDomain(const std::vector<int64_t>& s) const {
    if (s.size() != domain_.size() || s == domain_) return false;
    std::vector<int64_t> a = s, b = domain_;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return a == b;
  }

  // Such a value joins only as the producer of permutes (or of ops of its own shape) already
  // in the group: computed at each domain point through the permute's index map, read only
  // inside the group, never written by it.
  static bool FeedsAPermuteInto(const Node& n, const std::set<Node*>& merged) {
    for (int i = 0; i < n.num_outputs(); ++i) {
      for (Node* u : n.output(i)->uses()) {
        const bool layout = u->kind() == OpKind::kPermute || u->kind() == OpKind::kTranspose;
        if (!merged.count(u) ||
            (!layout && u->output()->type().sizes != n.output(i)->type().sizes)) {
          return false;
        }
      }
    }
    return true;
  }

  // Shapes a group can write: the domain, or one value per row.
  bool Storable(const std::vector<int64_t>& s) const {
    if (s == domain_ || s == outer_) return true;
    std::vector<int64_t> row = outer_;
    row.push_back(1);
    return s == row;
  }

  static std::string GroupName(const std::vector<Node*>& ordered) {
    std::multiset<OpKind> kinds;
    for (Node* n : ordered) kinds.insert(n->kind());
    if (kinds.count(OpKind::kAmax) && kinds.count(OpKind::kExp) && kinds.count(OpKind::kSum)) {
      return kinds.count(OpKind::kLog) ? "log_softmax" : "softmax";
    }
    const bool root = kinds.count(OpKind::kRsqrt) || kinds.count(OpKind::kSqrt);
    if (root && !kinds.count(OpKind::kSum) && kinds.count(OpKind::kMean) >= 2) return "layer_norm";
    if (root && !kinds.count(OpKind::kSum) && kinds.count(OpKind::kMean) == 1) return "rms_norm";
    return "row_" + FirstOpNames(ordered);
  }

  Graph* g_;
  NodeOrder order_;
  std::vector<int64_t> domain_;
  std::vector<int64_t> outer_;
};

}  // namespace

bool IsRowReduction(const Node& node) {
  switch (node.kind()) {
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kAmax:
    case OpKind::kAmin:
      break;
    default:
      return false;
  }
  const graph::TensorType& t = node.input(0)->type();
  // No row kernel for empty tensors: torch reduces them (to eager's 0, NaN or error).
  if (t.rank() < 1 || !graph::IsFloating(t.dtype) || t.numel() == 0) return false;
  auto dims = graph::ReductionDims(node.attrs(), t.rank());
  return dims.ok() && *dims == std::vector<int64_t>{t.rank() - 1};
}

absl::StatusOr<bool> FuseRowReductions(Graph* graph) { return RowFuser(graph).Run(); }

}  // namespace torchfuse::fusion
