#include "fusion/fuse_elementwise.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/status_macros.h"
#include "fusion/group_builder.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using graph::Value;

namespace {

bool IsScalarConstant(const Node& n) { return n.kind() == OpKind::kConstant; }

// A group under construction: its members and iteration domain.
struct Group {
  std::set<Node*> members;
  std::vector<int64_t> domain;
};

class Fuser {
 public:
  explicit Fuser(Graph* g) : g_(g), order_(*g) {}

  absl::StatusOr<bool> Run() {
    std::vector<Group> groups;
    std::set<Node*> assigned;
    // Roots are taken last-first, so each group grows backwards from its final consumer.
    for (int i = static_cast<int>(g_->nodes().size()) - 1; i >= 0; --i) {
      Node* root = g_->nodes()[i].get();
      if (!IsElementwiseFusible(*root) || assigned.count(root) || Broadcasts(*root) ||
          SlicesCatOperand(*root)) {
        continue;
      }
      Group group;
      group.members.insert(root);
      group.domain = root->output()->type().sizes;
      bool grew = true;
      while (grew) {
        grew = false;
        std::vector<Node*> members(group.members.begin(), group.members.end());
        for (Node* m : members) {
          for (Value* in : m->inputs()) {
            Node* p = in->producer();
            if (p == nullptr || group.members.count(p) || assigned.count(p)) continue;
            if (!IsElementwiseFusible(*p) || IsScalarConstant(*p) || SlicesCatOperand(*p)) {
              continue;
            }
            if (!CanJoin(p, group)) continue;
            group.members.insert(p);
            grew = true;
          }
        }
      }
      if (!HasWork(group)) continue;  // a lone view is free in torch
      for (Node* m : group.members) assigned.insert(m);
      groups.push_back(std::move(group));
    }
    if (groups.empty()) return false;
    MergeSiblings(&groups);
    for (Group& group : groups) {
      std::vector<Node*> ordered = order_.Sorted(group.members);
      BuildFusionGroup(g_, ordered, GroupName(ordered));
    }
    g_->SortTopologically();
    g_->RemoveDeadNodes();
    return true;
  }

 private:
  // An expand that broadcasts ends no group: torch's view of what the group writes is free,
  // where the group would write every copy. (An expand only widens size-1 dims and adds
  // leading ones: it broadcasts where it changes the sizes other than ones.)
  static bool Broadcasts(const Node& n) {
    return n.kind() == OpKind::kExpand &&
           graph::NonUnitDims(n.input(0)->type().sizes) !=
               graph::NonUnitDims(n.output()->type().sizes);
  }

  // A slice that takes one whole operand of a cat along its dim, read only by torch (through
  // views), joins no group: the cat lays that operand out with room after it (rows that start
  // at aligned addresses, as ATen's memory-efficient attention reads its mask), and in a group
  // the slice would leave the operand alone, written without the room. Read by a kernel (a
  // stack indexed back), the slice is an index map like any other.
  bool SlicesCatOperand(const Node& n) const {
    if (n.kind() != OpKind::kSlice || n.IntAttr("step") != 1) return false;
    const Node* cat = n.input(0)->producer();
    if (cat == nullptr || cat->kind() != OpKind::kCat) return false;
    const int rank = n.output()->type().rank();
    const auto dim = graph::WrapDim(n.IntAttr("dim"), rank);
    const auto cat_dim = graph::WrapDim(cat->IntAttr("dim"), rank);
    if (!dim.ok() || !cat_dim.ok() || *dim != *cat_dim) return false;
    int64_t start = 0;
    for (const Value* operand : cat->inputs()) {
      const int64_t size = operand->type().sizes[*dim];
      if (n.IntAttr("start") == start && n.output()->type().sizes[*dim] == size) {
        return ReadByTorchOnly(n.output());
      }
      start += size;
    }
    return false;
  }

  // Whether only torch's ops (and the graph's outputs) read `v`, through views.
  bool ReadByTorchOnly(const Value* v) const {
    for (const Node* u : v->uses()) {
      const OpCategory cat = graph::OpCategoryOf(u->kind());
      if (cat == OpCategory::kLayout && u->kind() != OpKind::kContiguous &&
          u->kind() != OpKind::kCat) {
        if (!ReadByTorchOnly(u->output())) return false;
      } else if (cat != OpCategory::kOpaque && cat != OpCategory::kMatmul) {
        return false;
      }
    }
    return true;
  }

  // Whether a group is worth a kernel: it computes, or it copies (a cat, or a contiguous copy
  // of a view that moves elements). A view alone is free in torch.
  static bool HasWork(const Group& group) {
    bool copies = false, moves = false;
    for (Node* m : group.members) {
      if (graph::IsElementwise(m->kind()) || m->kind() == OpKind::kCat) return true;
      copies |= m->kind() == OpKind::kContiguous;
      moves |= m->kind() == OpKind::kPermute || m->kind() == OpKind::kTranspose ||
               m->kind() == OpKind::kExpand || m->kind() == OpKind::kSlice;
    }
    return copies && moves;
  }

  bool CanJoin(Node* p, const Group& group) const {
    // A value that leaves the group is written over the group's domain.
    if (order_.UsedOutside(p, group.members) && p->output()->type().sizes != group.domain) {
      return false;
    }
    std::set<Node*> merged = group.members;
    merged.insert(p);
    return !order_.CreatesCycle(merged);
  }

  // Groups over the same domain that read a common value (horizontal fusion: one read of
  // that value), or of which one reads what the other computes (the value is not stored and
  // read back; it may still be stored for other users), become one kernel, unless that would
  // make a cycle. Groups grow backwards from their last node and stop at a producer an
  // earlier group took: `cos(e)` and `sin(e)` of one `e = cat(...)` start as two groups.
  void MergeSiblings(std::vector<Group>* groups) const {
    auto operands = [](const Group& g) {
      std::set<const Value*> in;
      for (Node* m : g.members) {
        for (Value* v : m->inputs()) {
          if (!(v->producer() && g.members.count(v->producer()))) in.insert(v);
        }
      }
      return in;
    };
    bool merged = true;
    while (merged) {
      merged = false;
      for (size_t i = 0; i < groups->size() && !merged; ++i) {
        for (size_t j = i + 1; j < groups->size() && !merged; ++j) {
          Group& a = (*groups)[i];
          Group& b = (*groups)[j];
          if (a.domain != b.domain) continue;
          const std::set<const Value*> ia = operands(a), ib = operands(b);
          bool shared = false;
          for (const Value* v : ia) {
            Node* p = v->producer();
            if (ib.count(v) && !(p && p->kind() == OpKind::kConstant)) shared = true;
            if (p && b.members.count(p)) shared = true;
          }
          for (const Value* v : ib) {
            Node* p = v->producer();
            if (p && a.members.count(p)) shared = true;
          }
          if (!shared) continue;
          std::set<Node*> both = a.members;
          both.insert(b.members.begin(), b.members.end());
          if (order_.CreatesCycle(both)) continue;
          a.members = std::move(both);
          groups->erase(groups->begin() + j);
          merged = true;
        }
      }
    }
  }

  static std::string GroupName(const std::vector<Node*>& ordered) {
    std::set<OpKind> kinds;
    bool param_input = false;
    for (Node* n : ordered) {
      kinds.insert(n->kind());
      for (Value* in : n->inputs()) {
        param_input |= in->producer() && in->producer()->kind() == OpKind::kParam;
      }
    }
    if (kinds.count(OpKind::kTanh) && kinds.count(OpKind::kPow) && kinds.count(OpKind::kMul)) {
      return param_input && kinds.count(OpKind::kAdd) ? "bias_gelu" : "gelu";
    }
    return FirstOpNames(ordered);
  }

  Graph* g_;
  NodeOrder order_;
};

}  // namespace

bool IsElementwiseFusible(const Node& node) {
  if (graph::IsElementwise(node.kind()) || node.kind() == OpKind::kConstant) return true;
  if (graph::OpCategoryOf(node.kind()) != OpCategory::kLayout) return false;
  // A slice is an index map with an offset where its step is 1. One that ends at a dynamic
  // size stays a view outside kernels, where each call checks its end.
  if (node.kind() == OpKind::kSlice) {
    return node.IntAttr("step") == 1 && !graph::IsSymbolic(node.IntAttr("end"));
  }
  // A reshape is an index map only where it adds or drops size-1 dims.
  if (node.kind() == OpKind::kReshape) {
    return graph::NonUnitDims(node.input(0)->type().sizes) ==
           graph::NonUnitDims(node.output()->type().sizes);
  }
  return true;
}

absl::StatusOr<bool> FuseElementwise(Graph* graph) { return Fuser(graph).Run(); }

}  // namespace torchfuse::fusion
