// How a fused elementwise kernel indexes its inputs: static index maps from the group's body,
// and the run-time layout (collapsed dims, strides, vector width) from the actual tensors.
#ifndef TORCHFUSE_CODEGEN_NVRTC_INDEXING_H_
#define TORCHFUSE_CODEGEN_NVRTC_INDEXING_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::codegen {

/// A condition on the iteration domain: lo <= index along domain dim `dim` < hi. A value read
/// under a cat is read only where the domain falls in that operand's part of the output.
struct Guard {
  int dim = 0;
  int64_t lo = 0;
  int64_t hi = 0;
  bool operator==(const Guard& o) const { return dim == o.dim && lo == o.lo && hi == o.hi; }
  bool operator<(const Guard& o) const {
    return dim != o.dim ? dim < o.dim : lo != o.lo ? lo < o.lo : hi < o.hi;
  }
};

/// How a value is indexed from the iteration domain: for each of its dims, the domain dim that
/// indexes it (-1: none) plus a constant offset (from slices and cats). Index along dim j =
/// (dims[j] >= 0 ? domain index dims[j] : 0) + offsets[j]. Where `guards` are given, the value
/// is read only at domain points that meet all of them (elsewhere its loads read nothing).
struct IndexMap {
  std::vector<int> dims;
  std::vector<int64_t> offsets;  // same length as dims
  std::vector<Guard> guards;

  IndexMap() = default;
  /// A map of `rank` dims, none indexed, no offsets.
  explicit IndexMap(size_t rank) : dims(rank, -1), offsets(rank, 0) {}
  /// A map with these dims and no offsets.
  IndexMap(std::initializer_list<int> d) : dims(d), offsets(d.size(), 0) {}
  /// The identity map of a rank-`rank` domain.
  static IndexMap Identity(size_t rank);

  size_t size() const { return dims.size(); }
  int& operator[](size_t i) { return dims[i]; }
  int operator[](size_t i) const { return dims[i]; }
  std::vector<int>::const_iterator begin() const { return dims.begin(); }
  std::vector<int>::const_iterator end() const { return dims.end(); }
  /// Appends a dim indexed by domain dim `d` (-1: none), offset 0.
  void push_back(int d) {
    dims.push_back(d);
    offsets.push_back(0);
  }
  void pop_back() {
    dims.pop_back();
    offsets.pop_back();
  }
  /// True when some offset is not 0 (the site's base address moves).
  bool HasOffset() const;
  bool operator==(const IndexMap& o) const {
    return dims == o.dims && offsets == o.offsets && guards == o.guards;
  }
  bool operator!=(const IndexMap& o) const { return !(*this == o); }
  bool operator<(const IndexMap& o) const {
    if (dims != o.dims) return dims < o.dims;
    if (offsets != o.offsets) return offsets < o.offsets;
    return guards < o.guards;
  }
};

/// The index map of operand `operand` of `node`, given the map of the node's output.
IndexMap OperandMap(const graph::Node& node, int operand, const IndexMap& out_map);

/// The dim a cat joins along, wrapped.
int CatDim(const graph::Node& cat);
/// Where cat operand `operand` starts along the cat's dim.
int64_t CatStart(const graph::Node& cat, int operand);

/// Whether operand `operand` of `node` is read at all under `out_map`: every operand, except
/// for a cat read at a fixed index along its dim (only the operand holding that index) and a
/// cat operand whose part of the output lies outside the guarded domain.
bool OperandRead(const graph::Node& node, int operand, const IndexMap& out_map,
                 const std::vector<int64_t>& domain);

/// One place where the kernel reads a body input: the input and the index map it is read with.
struct LoadSite {
  int input = 0;
  IndexMap map;
  /// Where the site is read through a contiguous copy (the outermost `contiguous` on its path
  /// with attribute `dense`: `x.contiguous()`, a clone to contiguous_format): that
  /// copy's index map and sizes. The pointwise ops above it see the copy, laid out densely in
  /// its own dims' order whatever the input's strides, so the outputs' order follows the copy
  /// there (DomainOrder), as eager's does.
  bool through_copy = false;
  IndexMap copy_map;
  std::vector<int64_t> copy_sizes;
};

/// Static indexing of a fusion group's body.
struct GroupIndexing {
  /// The iteration domain: the shape of every body output.
  std::vector<int64_t> domain;
  /// Load sites, in the order the emitter meets them.
  std::vector<LoadSite> sites;
  /// (input, map) -> index in `sites`.
  std::map<std::pair<int, IndexMap>, int> site_index;
  /// Domain dims whose index the kernel reads (cats select by them, guards test them), with
  /// the boundaries tested along each: these dims are never merged or dropped, and vectors
  /// along the innermost one never cross a boundary.
  std::map<int, std::set<int64_t>> observed;
  /// Every output is computed by a pointwise op (no layout op, no input passed through): its
  /// memory layout may follow the inputs' as eager's TensorIterator does (DomainOrder).
  bool pointwise_outputs = false;
  /// This indexing with the domain's symbols replaced by their values in `binding`.
  GroupIndexing Bound(const graph::SymbolBinding& binding) const;
};

/// Walks the body from its outputs and collects the load sites. InvalidArgument if the
/// outputs' shapes differ or a layout op cannot be expressed as an index map.
absl::StatusOr<GroupIndexing> AnalyzeIndexing(const graph::Graph& body);

/// How a load site is addressed in the generated code.
enum class Access {
  kLinear,          // offset == flat output index
  kScalar,          // every element reads element 0
  kInnerContiguous, // innermost stride 1: vector loads
  kInnerBroadcast,  // innermost stride 0: one load, splat
  kStrided,         // general strides, scalar loads
  kLanes,           // in a vector kernel: each of a chunk's elements loaded by itself (rows
                    // whose start is not aligned, or split by a boundary the site's loads test)
  kTile,            // in a tiled kernel: read along the tile dim into shared memory, then
                    // taken from there along the innermost dim (a transpose)
};

/// What of the run-time layout changes the generated source.
struct KernelLayout {
  int rank = 1;  // of the collapsed domain
  std::vector<Access> access;  // per load site
  int vec = 1;   // elements per thread per step
  int unroll = 1;  // vector chunks per thread per step (vec > 1 only): more bytes in flight
  bool index32 = true;
  /// Per observed domain dim (GroupIndexing::observed, in order): its dim in the collapsed
  /// domain.
  std::vector<int> observed_pos;
  /// A dim of the collapsed domain, not the innermost, along which the kTile sites are
  /// contiguous: the kernel walks the domain in 32 x 32 tiles of (tile_dim, innermost),
  /// each kTile site's part read along tile_dim into shared memory (coalesced) and every
  /// output written along the innermost dim (coalesced). -1: a flat grid-stride loop.
  int tile_dim = -1;
  /// In a tiled kernel: elements each lane reads of a tile row (kTile sites, as one vector)
  /// and writes of an output row (one vector); the other sites that are not broadcast load
  /// vectors too, or their elements one by one (kLanes). 1 where guards or observed dims
  /// are, or where sizes or alignment do not allow more.
  int tile_vec = 1;
  /// Short text for names and cache keys ("r2_v4_i32_LB").
  std::string Signature() const;
  bool operator==(const KernelLayout& o) const {
    return rank == o.rank && access == o.access && vec == o.vec && unroll == o.unroll &&
           index32 == o.index32 && observed_pos == o.observed_pos && tile_dim == o.tile_dim &&
           tile_vec == o.tile_vec;
  }
};

/// A tensor as the layout computation sees it.
struct TensorView {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements
  uintptr_t address = 0;
  int element_size = 4;
};

/// A kernel layout plus its run-time arguments.
struct LaunchLayout {
  KernelLayout kernel;
  int64_t numel = 0;
  std::vector<int64_t> sizes;                 // collapsed domain
  std::vector<std::vector<int64_t>> strides;  // per site, over the collapsed domain
  std::vector<int64_t> offsets;               // per offset site (OffsetSites), in elements
  /// The kernel's parameter block: numel, sizes, each site's strides, then the offset sites'
  /// base offsets, as 32- or 64-bit integers (KernelLayout::index32).
  std::vector<uint8_t> ParamBlock() const;
};

/// `values` as the kernel parameter block of 32-bit (`index32`) or 64-bit integers.
std::vector<uint8_t> PackIndexParams(const std::vector<int64_t>& values, bool index32);

/// Each site's strides over the `rank` dims of the domain: the strides of the dims of its
/// input that its index map sends there (0 for broadcast dims).
std::vector<std::vector<int64_t>> DomainStrides(const std::vector<LoadSite>& sites,
                                                const std::vector<TensorView>& inputs, int rank);

/// Each site's base offset in elements from its input's address (its map's offsets times the
/// input's strides; 0 for sites without offsets).
std::vector<int64_t> SiteOffsets(const std::vector<LoadSite>& sites,
                                 const std::vector<TensorView>& inputs);

/// The sites whose maps carry offsets: each gets a base-offset kernel parameter, in this order.
std::vector<int> OffsetSites(const std::vector<LoadSite>& sites);

/// The order, outermost first, in which the outputs lay out the domain's dims in memory:
/// eager's rule (TensorIterator's) for pointwise results, so that channels-last or transposed
/// inputs give outputs laid out alike. Each pair of dims is ordered by the strides of the
/// first site that tells them apart (dims it broadcasts tell nothing; a site read through a
/// contiguous copy tells the copy's order, LoadSite::through_copy); dims no site orders keep
/// the domain's order. The identity for groups without pointwise_outputs, with observed dims,
/// or whose inputs are laid out as the domain.
std::vector<int> DomainOrder(const GroupIndexing& indexing, const std::vector<TensorView>& inputs);

/// Strides of a dense tensor of `sizes` whose dims are laid out in `order` (outermost first).
std::vector<int64_t> StridesInOrder(const std::vector<int64_t>& sizes,
                                    const std::vector<int>& order);

/// Computes the layout for inputs `inputs` (one per body input) and outputs of element sizes
/// `output_element_sizes` at `output_addresses`, dense in DomainOrder(indexing, inputs)
/// (StridesInOrder). Size-1 dims are dropped and adjacent dims merged where every site allows
/// it; the vector width is 16 bytes over the widest element where the outputs' sizes and
/// alignment allow, else 1. In a vector kernel of several dims, a site whose rows are
/// contiguous or broadcast but that cannot load whole vectors (its rows start unaligned, or a
/// cat boundary it is guarded by splits a vector) loads each element by itself (kLanes): the
/// index arithmetic and the stores stay per vector. So does a strided site that reads at most
/// an eighth as many elements as the kernel writes (a small table, reused from cache); a
/// strided site that streams (a transpose) keeps the whole kernel scalar, and where it is
/// contiguous along another dim of at least 16 elements (the innermost having 16 or more
/// too), the kernel is tiled over that dim and the innermost (KernelLayout::tile_dim), the
/// sites contiguous along it read through shared memory (kTile).
LaunchLayout ComputeLayout(const GroupIndexing& indexing, const std::vector<TensorView>& inputs,
                           const std::vector<int>& output_element_sizes,
                           const std::vector<uintptr_t>& output_addresses);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_INDEXING_H_
