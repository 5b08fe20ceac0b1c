#include "codegen_nvrtc/indexing.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/shape.h"

namespace torchfuse::codegen {

using graph::Node;
using graph::OpKind;

IndexMap IndexMap::Identity(size_t rank) {
  IndexMap m(rank);
  for (size_t i = 0; i < rank; ++i) m.dims[i] = static_cast<int>(i);
  return m;
}

bool IndexMap::HasOffset() const {
  for (int64_t o : offsets) {
    if (o != 0) return true;
  }
  return false;
}

IndexMap OperandMap(const Node& node, int operand, const IndexMap& out) {
  const std::vector<int64_t>& in_sizes = node.input(operand)->type().sizes;
  const int in_rank = static_cast<int>(in_sizes.size());
  const int out_rank = static_cast<int>(out.size());
  IndexMap map(in_rank);
  map.guards = out.guards;  // conditions on the domain hold for everything read below
  // Input dim `i` is indexed as output dim `o` is.
  auto take = [&](int i, int o) {
    map.dims[i] = out.dims[o];
    map.offsets[i] = out.offsets[o];
  };
  switch (node.kind()) {
    case OpKind::kTranspose: {
      for (int i = 0; i < in_rank; ++i) take(i, i);
      if (in_rank > 0) {
        const int d0 = static_cast<int>(*graph::WrapDim(node.IntAttr("dim0"), in_rank));
        const int d1 = static_cast<int>(*graph::WrapDim(node.IntAttr("dim1"), in_rank));
        take(d0, d1);
        take(d1, d0);
      }
      break;
    }
    case OpKind::kPermute: {
      const std::vector<int64_t>& dims = node.IntsAttr("dims");
      for (int i = 0; i < out_rank; ++i) take(static_cast<int>(*graph::WrapDim(dims[i], in_rank)), i);
      break;
    }
    case OpKind::kUnsqueeze: {
      const int d = static_cast<int>(*graph::WrapDim(node.IntAttr("dim"), in_rank + 1));
      for (int i = 0, j = 0; i < out_rank; ++i) {
        if (i != d) take(j++, i);
      }
      break;
    }
    case OpKind::kSqueeze:
    case OpKind::kReshape: {
      // Only size-1 dims differ: match the other dims in order.
      const std::vector<int64_t>& out_sizes = node.output()->type().sizes;
      int j = 0;
      for (int i = 0; i < in_rank; ++i) {
        if (in_sizes[i] == 1) continue;
        while (j < out_rank && out_sizes[j] == 1) ++j;
        if (j < out_rank) take(i, j++);
      }
      break;
    }
    case OpKind::kSlice: {
      // Step 1 only (the fuser takes no other): the slice's start moves the dim's offset.
      for (int i = 0; i < in_rank; ++i) take(i, i);
      const int d = static_cast<int>(*graph::WrapDim(node.IntAttr("dim"), in_rank));
      map.offsets[d] += node.IntAttr("start");
      break;
    }
    case OpKind::kCat: {
      // The operand holds [start, start + size) of the output along the dim: read it there
      // only, shifted back by its start.
      for (int i = 0; i < in_rank; ++i) take(i, i);
      const int d = CatDim(node);
      const int64_t start = CatStart(node, operand);
      map.offsets[d] -= start;
      if (out.dims[d] >= 0) {
        map.guards.push_back({out.dims[d], start - out.offsets[d],
                              start + in_sizes[d] - out.offsets[d]});
        std::sort(map.guards.begin(), map.guards.end());
        map.guards.erase(std::unique(map.guards.begin(), map.guards.end()), map.guards.end());
      }
      // Where the operand is one wide, the guard leaves index 0 only.
      if (in_sizes[d] == 1) map.offsets[d] = 0;
      break;
    }
    default: {
      // Broadcasting (elementwise ops, expand, contiguous): align trailing dims. A broadcast
      // (size-1) dim reads index 0, whatever the output's offset there.
      const int lead = out_rank - in_rank;
      for (int i = 0; i < in_rank; ++i) {
        if (in_sizes[i] != 1) take(i, i + lead);
      }
      break;
    }
  }
  // A size-1 dim is never indexed by the domain (its offset, from a slice, stays).
  for (int i = 0; i < in_rank; ++i) {
    if (in_sizes[i] == 1) map.dims[i] = -1;
  }
  return map;
}

int CatDim(const Node& cat) {
  return static_cast<int>(*graph::WrapDim(cat.IntAttr("dim"), cat.output()->type().rank()));
}

int64_t CatStart(const Node& cat, int operand) {
  const int d = CatDim(cat);
  int64_t start = 0;
  for (int k = 0; k < operand; ++k) start += cat.input(k)->type().sizes[d];
  return start;
}

bool OperandRead(const Node& node, int operand, const IndexMap& out,
                 const std::vector<int64_t>& domain) {
  if (node.kind() != OpKind::kCat) return true;
  const int d = CatDim(node);
  const int64_t start = CatStart(node, operand);
  const int64_t end = start + node.input(operand)->type().sizes[d];
  if (out.dims[d] < 0) return start <= out.offsets[d] && out.offsets[d] < end;
  // The operand's part, in domain indices, against the domain and the guards on that dim.
  int64_t lo = std::max<int64_t>(start - out.offsets[d], 0);
  int64_t hi = std::min<int64_t>(end - out.offsets[d], domain[out.dims[d]]);
  for (const Guard& g : out.guards) {
    if (g.dim == out.dims[d]) {
      lo = std::max(lo, g.lo);
      hi = std::min(hi, g.hi);
    }
  }
  return lo < hi;
}

namespace {

class Analyzer {
 public:
  explicit Analyzer(GroupIndexing* out) : out_(out) {}

  // `copy`: the outermost contiguous copy on the path from the outputs to `v` (null: none).
  void Visit(const graph::Value* v, const IndexMap& map, const LoadSite* copy = nullptr) {
    if (!seen_.insert({v, map}).second) return;
    const Node* p = v->producer();
    if (p == nullptr) {
      auto key = std::make_pair(v->index(), map);
      if (!out_->site_index.count(key)) {
        out_->site_index[key] = static_cast<int>(out_->sites.size());
        LoadSite site;
        site.input = v->index();
        site.map = map;
        if (copy != nullptr) {
          site.through_copy = true;
          site.copy_map = copy->copy_map;
          site.copy_sizes = copy->copy_sizes;
        }
        out_->sites.push_back(std::move(site));
      }
      return;
    }
    LoadSite here;
    if (copy == nullptr && p->kind() == OpKind::kContiguous && p->HasAttr("dense")) {
      here.copy_map = map;
      here.copy_sizes = v->type().sizes;
      copy = &here;
    }
    if (p->kind() == OpKind::kCat) {
      const int d = CatDim(*p);
      if (map.dims[d] >= 0) {
        // The kernel selects the operand by this domain index.
        std::set<int64_t>& b = out_->observed[map.dims[d]];
        for (int i = 1; i < static_cast<int>(p->inputs().size()); ++i) {
          b.insert(CatStart(*p, i) - map.offsets[d]);
        }
      }
    }
    for (int i = 0; i < static_cast<int>(p->inputs().size()); ++i) {
      if (!OperandRead(*p, i, map, out_->domain)) continue;
      IndexMap m = OperandMap(*p, i, map);
      for (const Guard& g : m.guards) {
        std::set<int64_t>& b = out_->observed[g.dim];
        b.insert(g.lo);
        b.insert(g.hi);
      }
      Visit(p->input(i), m, copy);
    }
  }

 private:
  GroupIndexing* out_;
  std::set<std::pair<const graph::Value*, IndexMap>> seen_;
};

}  // namespace

GroupIndexing GroupIndexing::Bound(const graph::SymbolBinding& binding) const {
  GroupIndexing out = *this;
  out.domain = binding.Apply(domain);
  return out;
}

absl::StatusOr<GroupIndexing> AnalyzeIndexing(const graph::Graph& body) {
  GroupIndexing out;
  if (body.outputs().empty()) return absl::InvalidArgumentError("fusion group without outputs");
  out.domain = body.outputs()[0]->type().sizes;
  for (const graph::Value* v : body.outputs()) {
    if (v->type().sizes != out.domain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fusion group outputs have different shapes: ", body.outputs()[0]->type().ToString(),
          " and ", v->type().ToString()));
    }
  }
  const IndexMap identity = IndexMap::Identity(out.domain.size());
  Analyzer analyzer(&out);
  for (const graph::Value* v : body.outputs()) analyzer.Visit(v, identity);
  out.pointwise_outputs = true;
  for (const graph::Value* v : body.outputs()) {
    out.pointwise_outputs &= v->producer() != nullptr && graph::IsElementwise(v->producer()->kind());
  }
  return out;
}

std::string KernelLayout::Signature() const {
  std::string s = absl::StrCat("r", rank, "_v", vec, "_u", unroll, index32 ? "_i32_" : "_i64_");
  if (!observed_pos.empty()) absl::StrAppend(&s, "o", absl::StrJoin(observed_pos, "."), "_");
  if (tile_dim >= 0) absl::StrAppend(&s, "t", tile_dim, ".", tile_vec, "_");
  for (Access a : access) {
    switch (a) {
      case Access::kLinear: s += 'L'; break;
      case Access::kScalar: s += 'S'; break;
      case Access::kInnerContiguous: s += 'C'; break;
      case Access::kInnerBroadcast: s += 'B'; break;
      case Access::kStrided: s += 'X'; break;
      case Access::kLanes: s += 'E'; break;
      case Access::kTile: s += 'T'; break;
    }
  }
  return s;
}

std::vector<uint8_t> PackIndexParams(const std::vector<int64_t>& values, bool index32) {
  std::vector<uint8_t> bytes;
  for (int64_t v : values) {
    if (index32) {
      int32_t x = static_cast<int32_t>(v);
      bytes.insert(bytes.end(), reinterpret_cast<uint8_t*>(&x), reinterpret_cast<uint8_t*>(&x) + 4);
    } else {
      bytes.insert(bytes.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
    }
  }
  return bytes;
}

std::vector<std::vector<int64_t>> DomainStrides(const std::vector<LoadSite>& sites,
                                                const std::vector<TensorView>& inputs, int rank) {
  std::vector<std::vector<int64_t>> est(sites.size(), std::vector<int64_t>(rank, 0));
  for (size_t s = 0; s < sites.size(); ++s) {
    const TensorView& t = inputs[sites[s].input];
    for (size_t j = 0; j < sites[s].map.size(); ++j) {
      if (sites[s].map[j] >= 0 && t.sizes[j] != 1) est[s][sites[s].map[j]] += t.strides[j];
    }
  }
  return est;
}

std::vector<int64_t> SiteOffsets(const std::vector<LoadSite>& sites,
                                 const std::vector<TensorView>& inputs) {
  std::vector<int64_t> out(sites.size(), 0);
  for (size_t s = 0; s < sites.size(); ++s) {
    const TensorView& t = inputs[sites[s].input];
    for (size_t j = 0; j < sites[s].map.size(); ++j) {
      out[s] += sites[s].map.offsets[j] * t.strides[j];
    }
  }
  return out;
}

std::vector<int> OffsetSites(const std::vector<LoadSite>& sites) {
  std::vector<int> out;
  for (size_t s = 0; s < sites.size(); ++s) {
    if (sites[s].map.HasOffset()) out.push_back(static_cast<int>(s));
  }
  return out;
}

std::vector<uint8_t> LaunchLayout::ParamBlock() const {
  std::vector<int64_t> values = {numel};
  values.insert(values.end(), sizes.begin(), sizes.end());
  for (const auto& s : strides) values.insert(values.end(), s.begin(), s.end());
  values.insert(values.end(), offsets.begin(), offsets.end());
  return PackIndexParams(values, kernel.index32);
}

namespace {

// The strides DomainOrderOf orders the domain by: each site's strides over the domain (`est`,
// DomainStrides'), or, for a site read through a contiguous copy, the copy's (dense in its
// dims' order: what eager's pointwise ops above it see). Only their order matters: a copy's
// dim k of n counts n - k.
std::vector<std::vector<int64_t>> OrderStrides(const GroupIndexing& indexing,
                                               std::vector<std::vector<int64_t>> est) {
  for (size_t s = 0; s < indexing.sites.size(); ++s) {
    const LoadSite& site = indexing.sites[s];
    if (!site.through_copy) continue;
    std::fill(est[s].begin(), est[s].end(), 0);
    const int n = static_cast<int>(site.copy_map.size());
    for (int k = 0; k < n; ++k) {
      if (site.copy_map[k] >= 0 && site.copy_sizes[k] != 1) est[s][site.copy_map[k]] += n - k;
    }
  }
  return est;
}

std::vector<int> DomainOrderOf(const GroupIndexing& indexing,
                               const std::vector<std::vector<int64_t>>& est) {
  const int rank = static_cast<int>(indexing.domain.size());
  // Innermost first, as TensorIterator sorts: > 0 when dim `a` belongs outside dim `b`.
  std::vector<int> perm(rank);
  for (int k = 0; k < rank; ++k) perm[k] = rank - 1 - k;
  if (!indexing.pointwise_outputs || !indexing.observed.empty() || rank < 2) {
    std::reverse(perm.begin(), perm.end());
    return perm;
  }
  auto outside = [&](int a, int b) {
    for (const std::vector<int64_t>& st : est) {
      const int64_t sa = st[a], sb = st[b];
      if (sa == 0 || sb == 0) continue;  // broadcast along one of them: ask the next site
      if (sa < sb) return -1;
      if (sa > sb) return 1;
      // Equal strides (a size-1 dim of the input): the larger dim goes outside.
      if (indexing.domain[a] > indexing.domain[b]) return 1;
    }
    return 0;
  };
  for (int i = 1; i < rank; ++i) {
    int inner = i;
    for (int j = i - 1; j >= 0; --j) {
      const int c = outside(perm[j], perm[inner]);
      if (c > 0) {
        std::swap(perm[j], perm[inner]);
        inner = j;
      } else if (c < 0) {
        break;
      }
    }
  }
  std::reverse(perm.begin(), perm.end());
  return perm;
}

}  // namespace

std::vector<int> DomainOrder(const GroupIndexing& indexing, const std::vector<TensorView>& inputs) {
  const int rank = static_cast<int>(indexing.domain.size());
  return DomainOrderOf(indexing,
                       OrderStrides(indexing, DomainStrides(indexing.sites, inputs, rank)));
}

std::vector<int64_t> StridesInOrder(const std::vector<int64_t>& sizes,
                                    const std::vector<int>& order) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t step = 1;
  for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
    strides[order[i]] = step;
    step *= std::max<int64_t>(sizes[order[i]], 1);
  }
  return strides;
}

LaunchLayout ComputeLayout(const GroupIndexing& indexing, const std::vector<TensorView>& inputs,
                           const std::vector<int>& output_element_sizes,
                           const std::vector<uintptr_t>& output_addresses) {
  const int rank = static_cast<int>(indexing.domain.size());
  const size_t nsites = indexing.sites.size();
  const std::vector<std::vector<int64_t>> est = DomainStrides(indexing.sites, inputs, rank);
  // The domain walked in the outputs' memory order: outputs are written at the flat index.
  const std::vector<int> order = DomainOrderOf(indexing, OrderStrides(indexing, est));
  const std::vector<int64_t> site_offsets = SiteOffsets(indexing.sites, inputs);
  // Keep dims of size > 1, merging a dim into the previous kept one where every site allows.
  LaunchLayout out;
  out.numel = 1;
  for (int64_t d : indexing.domain) out.numel *= d;
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(nsites);
  // Observed dims stay dims of their own: never dropped, never merged with a neighbour.
  std::map<int, int> observed_pos;
  bool after_observed = false;
  for (int k : order) {
    const int64_t size = indexing.domain[k];
    const bool observed = indexing.observed.count(k) > 0;
    if (size == 1 && !observed) continue;
    bool merge = !sizes.empty() && !observed && !after_observed;
    after_observed = observed;
    if (observed) observed_pos[k] = static_cast<int>(sizes.size());
    for (size_t s = 0; s < nsites && merge; ++s) merge = strides[s].back() == est[s][k] * size;
    if (merge) {
      sizes.back() *= size;
      for (size_t s = 0; s < nsites; ++s) strides[s].back() = est[s][k];
    } else {
      sizes.push_back(size);
      for (size_t s = 0; s < nsites; ++s) strides[s].push_back(est[s][k]);
    }
  }
  if (sizes.empty()) {
    sizes.push_back(out.numel);
    for (size_t s = 0; s < nsites; ++s) strides[s].push_back(0);
  }
  const int r = static_cast<int>(sizes.size());
  for (const auto& [dim, pos] : observed_pos) out.kernel.observed_pos.push_back(pos);
  std::vector<int64_t> contiguous(r, 1);
  for (int k = r - 2; k >= 0; --k) contiguous[k] = contiguous[k + 1] * sizes[k + 1];

  int widest = 1;
  for (const TensorView& t : inputs) widest = std::max(widest, t.element_size);
  for (int e : output_element_sizes) widest = std::max(widest, e);
  int vec = std::max(1, 16 / widest);
  int64_t max_offset = out.numel;
  // Per site: one past the farthest element it reads.
  std::vector<int64_t> reach(nsites, 0);
  out.kernel.rank = r;
  for (size_t s = 0; s < nsites; ++s) {
    const std::vector<int64_t>& st = strides[s];
    bool all_zero = true;
    for (int64_t x : st) all_zero &= x == 0;
    Access a;
    if (all_zero) a = Access::kScalar;
    else if (st == contiguous) a = Access::kLinear;
    else if (st.back() == 1) a = Access::kInnerContiguous;
    else if (st.back() == 0) a = Access::kInnerBroadcast;
    else a = Access::kStrided;
    out.kernel.access.push_back(a);
    reach[s] = site_offsets[s] + 1;
    for (int k = 0; k < r; ++k) reach[s] += std::abs(st[k]) * (sizes[k] - 1);
    max_offset = std::max(max_offset, reach[s]);
  }
  // Vector width: chunks of `vec` elements never cross a row (rank > 1) and outputs are
  // aligned. Sites load whole vectors where aligned and not strided; where a site's rows are
  // contiguous or broadcast but it cannot, it loads a chunk's elements one by one (kLanes).
  // Whether `address` starts a vector of `width` elements of `element_size` bytes.
  auto aligned = [](uintptr_t address, int element_size, int width) {
    return address % (static_cast<uintptr_t>(width) * element_size) == 0;
  };
  // Where site `s` reads its first element.
  auto site_address = [&](size_t s) {
    const TensorView& t = inputs[indexing.sites[s].input];
    return t.address + static_cast<uintptr_t>(site_offsets[s] * t.element_size);
  };
  bool can_vec = vec > 1;
  if (r > 1 && sizes.back() % vec != 0) can_vec = false;
  for (size_t o = 0; o < output_addresses.size() && can_vec; ++o) {
    can_vec = aligned(output_addresses[o], output_element_sizes[o], vec);
  }
  // A boundary of the innermost dim that splits a vector: a cat's select tests each element's
  // index (per lane), but a site guarded there must load per lane.
  auto splits = [&](int dim, int64_t b) {
    auto it = observed_pos.find(dim);
    return it != observed_pos.end() && it->second == r - 1 && b > 0 &&
           b < indexing.domain[dim] && b % vec != 0;
  };
  std::vector<bool> lanes(nsites, false);
  for (size_t s = 0; s < nsites && can_vec; ++s) {
    const TensorView& t = inputs[indexing.sites[s].input];
    const uintptr_t address = site_address(s);
    bool whole = true;
    switch (out.kernel.access[s]) {
      case Access::kLinear:
        whole = aligned(address, t.element_size, vec);
        break;
      case Access::kInnerContiguous:
        whole = aligned(address, t.element_size, vec);
        for (int k = 0; k < r - 1; ++k) whole &= strides[s][k] % vec == 0;
        break;
      case Access::kScalar:
      case Access::kInnerBroadcast:
      case Access::kLanes:  // assigned below, from `lanes`
      case Access::kTile:   // assigned below, in scalar kernels
        break;
      case Access::kStrided:
        // Per-lane loads of a strided site pay where what it reads is reused from cache (a
        // small table read by every row: Swin's gathered position bias, 2.2x faster on an
        // H100); one that streams (a transpose: x.t() + y, 3-11 % slower) keeps the kernel
        // scalar.
        whole = false;
        if (reach[s] * 8 > out.numel) can_vec = false;
        break;
    }
    for (const Guard& g : indexing.sites[s].map.guards) {
      whole &= !splits(g.dim, g.lo) && !splits(g.dim, g.hi);
    }
    lanes[s] = !whole;
  }
  bool any_lanes = false;
  for (bool l : lanes) any_lanes |= l;
  // Per-lane loads pay where they save index arithmetic: in a flat domain there is none.
  if (any_lanes && r == 1) can_vec = false;
  if (can_vec) {
    for (size_t s = 0; s < nsites; ++s) {
      if (lanes[s]) out.kernel.access[s] = Access::kLanes;
    }
  }
  out.kernel.vec = can_vec ? vec : 1;
  // A scalar kernel with a strided site that streams (reads as many elements as it writes,
  // not a table reused from cache): each warp's loads of it touch 32 sectors for 32 elements.
  // Where that site is contiguous along another dim, tiles of that dim and the innermost
  // read it through shared memory, coalesced both ways.
  constexpr int64_t kMinTileExtent = 16;
  if (out.kernel.vec == 1 && r > 1 && sizes[r - 1] >= kMinTileExtent) {
    for (size_t s = 0; s < nsites && out.kernel.tile_dim < 0; ++s) {
      if (out.kernel.access[s] != Access::kStrided || reach[s] * 8 <= out.numel) continue;
      for (int k = 0; k < r - 1; ++k) {
        if (strides[s][k] == 1 && sizes[k] >= kMinTileExtent) out.kernel.tile_dim = k;
      }
    }
    for (size_t s = 0; s < nsites && out.kernel.tile_dim >= 0; ++s) {
      if (out.kernel.access[s] == Access::kStrided && strides[s][out.kernel.tile_dim] == 1) {
        out.kernel.access[s] = Access::kTile;
      }
    }
  }
  if (out.kernel.tile_dim >= 0) {
    // Vectors along the tile's rows: 16 bytes of the widest element read or written, halved
    // until the sizes and every vector's alignment allow it.
    const int t = out.kernel.tile_dim;
    bool plain = indexing.observed.empty();
    for (const LoadSite& site : indexing.sites) plain &= site.map.guards.empty();
    int w = 1;
    for (int e : output_element_sizes) w = std::max(w, e);
    for (size_t s = 0; s < nsites; ++s) {
      const Access a = out.kernel.access[s];
      if (a != Access::kScalar && a != Access::kInnerBroadcast) {
        w = std::max(w, inputs[indexing.sites[s].input].element_size);
      }
    }
    auto fits = [&](int v) {
      if (sizes[t] % v != 0 || sizes[r - 1] % v != 0) return false;
      for (size_t o = 0; o < output_addresses.size(); ++o) {
        if (!aligned(output_addresses[o], output_element_sizes[o], v)) return false;
      }
      for (size_t s = 0; s < nsites; ++s) {
        const Access a = out.kernel.access[s];
        if (a == Access::kScalar || a == Access::kInnerBroadcast || a == Access::kStrided) continue;
        if (!aligned(site_address(s), inputs[indexing.sites[s].input].element_size, v)) return false;
        // Every vector starts a multiple of v elements along its contiguous dim.
        const int along = a == Access::kTile ? t : r - 1;
        for (int k = 0; k < r; ++k) {
          if (k != along && strides[s][k] % v != 0) return false;
        }
      }
      return true;
    };
    int v = plain ? std::max(1, 16 / w) : 1;
    while (v > 1 && !fits(v)) v /= 2;
    out.kernel.tile_vec = v;
    if (v > 1) {
      // Strided sites not read through the tile load each element by itself.
      for (Access& a : out.kernel.access) {
        if (a == Access::kStrided) a = Access::kLanes;
      }
    }
  }
  // Two chunks per thread where index arithmetic (rank > 1) leaves latency to hide and there
  // is work enough; on an H200 that was faster for bias+gelu and slower for flat gelu.
  out.kernel.unroll =
      (out.kernel.vec > 1 && r > 1 && out.numel / out.kernel.vec >= (int64_t{1} << 18)) ? 2 : 1;
  // 32-bit indexing while offsets, and the loop counters that run up to twice the work, fit.
  out.kernel.index32 = max_offset < (int64_t{1} << 30);
  out.sizes = std::move(sizes);
  out.strides = std::move(strides);
  for (int s : OffsetSites(indexing.sites)) out.offsets.push_back(site_offsets[s]);
  return out;
}

}  // namespace torchfuse::codegen
