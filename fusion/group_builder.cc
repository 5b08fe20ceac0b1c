#include "fusion/group_builder.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_join.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

std::set<Node*> GrowGroup(Node* seed, const NodeOrder& order, const std::set<Node*>& assigned,
                         const std::function<bool(const Node&)>& sibling,
                         const std::function<bool(const Node&, const std::set<Node*>&)>& admit) {
  std::set<Node*> members = {seed};
  bool grew = true;
  while (grew) {
    grew = false;
    std::vector<Node*> current(members.begin(), members.end());
    for (Node* m : current) {
      std::vector<Node*> neighbours;
      for (Value* in : m->inputs()) {
        if (in->producer() != nullptr) neighbours.push_back(in->producer());
        for (Node* u : in->uses()) {
          if (sibling(*u)) neighbours.push_back(u);
        }
      }
      for (int i = 0; i < m->num_outputs(); ++i) {
        for (Node* u : m->output(i)->uses()) neighbours.push_back(u);
      }
      for (Node* n : neighbours) {
        if (members.count(n) || assigned.count(n)) continue;
        std::set<Node*> merged = members;
        merged.insert(n);
        if (!admit(*n, merged) || order.CreatesCycle(merged)) continue;
        members = std::move(merged);
        grew = true;
      }
    }
  }
  return members;
}

bool BroadcastsInto(const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  if (s.size() > d.size()) return false;
  const size_t lead = d.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != 1 && s[i] != d[lead + i]) return false;
  }
  return true;
}

NodeOrder::NodeOrder(const Graph& graph) : graph_(graph) {
  int i = 0;
  for (const auto& n : graph.nodes()) index_[n.get()] = i++;
}

bool NodeOrder::CreatesCycle(const std::set<Node*>& members) const {
  int last = 0;
  for (Node* m : members) last = std::max(last, index_.at(m));
  std::vector<Node*> stack;
  std::set<Node*> seen;
  for (Node* m : members) {
    for (int i = 0; i < m->num_outputs(); ++i) {
      for (Node* u : m->output(i)->uses()) {
        if (!members.count(u)) stack.push_back(u);
      }
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second || index_.at(n) > last) continue;
    for (int i = 0; i < n->num_outputs(); ++i) {
      for (Node* u : n->output(i)->uses()) {
        if (members.count(u)) return true;
        stack.push_back(u);
      }
    }
  }
  return false;
}

bool NodeOrder::UsedOutside(const Node* node, const std::set<Node*>& members) const {
  for (int i = 0; i < node->num_outputs(); ++i) {
    for (Node* u : node->output(i)->uses()) {
      if (!members.count(u)) return true;
    }
    const auto& outs = graph_.outputs();
    if (std::find(outs.begin(), outs.end(), node->output(i)) != outs.end()) return true;
  }
  return false;
}

std::vector<Node*> NodeOrder::Sorted(const std::set<Node*>& members) const {
  std::vector<Node*> ordered(members.begin(), members.end());
  std::sort(ordered.begin(), ordered.end(),
            [&](Node* a, Node* b) { return index_.at(a) < index_.at(b); });
  return ordered;
}

std::string FirstOpNames(const std::vector<Node*>& ordered) {
  std::vector<std::string> names;
  for (Node* n : ordered) {
    const bool computes = graph::IsElementwise(n->kind()) || n->kind() == graph::OpKind::kCat ||
                          graph::OpCategoryOf(n->kind()) == graph::OpCategory::kReduction;
    if (!computes) continue;
    std::string name = graph::OpName(n->kind());
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    if (names.size() == 3) break;
  }
  // A group of views only is a copy (a contiguous copy of a moved view).
  return names.empty() ? std::string("copy") : absl::StrJoin(names, "_");
}

Node* BuildFusionGroup(Graph* graph, const std::vector<Node*>& members, const std::string& name) {
  const std::set<Node*> in_group(members.begin(), members.end());
  auto body = std::make_unique<Graph>();
  std::map<Value*, Value*> mapped;  // outer value -> body value
  std::vector<Value*> outer_inputs;
  std::vector<std::string> sources;

  auto body_value = [&](Value* v) -> Value* {
    auto it = mapped.find(v);
    if (it != mapped.end()) return it->second;
    Node* p = v->producer();
    if (p != nullptr && p->kind() == OpKind::kConstant) {
      Node* c = body->AppendNode(OpKind::kConstant, {}, p->attrs(), {v->type()});
      c->set_source(p->source());
      return mapped[v] = c->output();
    }
    outer_inputs.push_back(v);
    return mapped[v] = body->AddInput(v->type());
  };

  for (Node* m : members) {
    std::vector<Value*> ins;
    for (Value* v : m->inputs()) ins.push_back(body_value(v));
    std::vector<graph::TensorType> types;
    for (int i = 0; i < m->num_outputs(); ++i) types.push_back(m->output(i)->type());
    Node* copy = body->AppendNode(m->kind(), ins, m->attrs(), types);
    copy->set_source(m->source());
    for (int i = 0; i < m->num_outputs(); ++i) mapped[m->output(i)] = copy->output(i);
  }

  std::vector<Value*> outer_outputs;
  const std::set<Value*> graph_outputs(graph->outputs().begin(), graph->outputs().end());
  for (Node* m : members) {
    for (int i = 0; i < m->num_outputs(); ++i) {
      Value* v = m->output(i);
      bool escapes = graph_outputs.count(v) > 0;
      for (Node* u : v->uses()) escapes |= !in_group.count(u);
      if (escapes) {
        outer_outputs.push_back(v);
        body->AddOutput(mapped.at(v));
      }
    }
  }

  std::vector<graph::TensorType> out_types;
  for (Value* v : outer_outputs) out_types.push_back(v->type());
  Node* last = members.back();
  const int last_index = graph->IndexOf(last);
  Node* after = last_index + 1 < static_cast<int>(graph->nodes().size())
                    ? graph->nodes()[last_index + 1].get()
                    : nullptr;
  Node* group = graph->InsertNodeBefore(after, OpKind::kFusionGroup, outer_inputs,
                                        {{"name", name}}, out_types);
  group->set_source("fusion");
  graph->SetBody(group, std::move(body));
  for (size_t i = 0; i < outer_outputs.size(); ++i) {
    graph->ReplaceAllUsesWith(outer_outputs[i], group->output(static_cast<int>(i)));
  }
  // Members are now dead: remove them last-first so each has no users left.
  for (auto it = members.rbegin(); it != members.rend(); ++it) graph->RemoveNode(*it);
  return group;
}

}  // namespace torchfuse::fusion
