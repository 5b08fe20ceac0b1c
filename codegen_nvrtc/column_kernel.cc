#include "codegen_nvrtc/column_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "codegen_nvrtc/cuda_writer.h"
#include "codegen_nvrtc/expr_emitter.h"
#include "common/status_macros.h"
#include "graph/shape.h"

namespace torchfuse::codegen {

using graph::DType;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Pow2Ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// The reduced dims of a column reduction of a rank-`rank` input, or an error.
absl::StatusOr<std::vector<int64_t>> ColumnDims(const Node& n) {
  const int64_t rank = n.input(0)->type().rank();
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> dims, graph::ReductionDims(n.attrs(), rank));
  if (rank < 2 || dims.empty() || dims.back() == rank - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column group: ", graph::OpName(n.kind()), " of ", n.input(0)->type().ToString(),
        " reduces the innermost dim or nothing"));
  }
  return dims;
}

class ColumnAnalyzer {
 public:
  explicit ColumnAnalyzer(ColumnIndexing* out) : out_(out) {}

  // The map a reduction's result is read with where it is not broadcast: the kept dims (and,
  // with keepdim, the reduced ones as size 1).
  IndexMap ResultMap(bool keepdim) const {
    IndexMap m;
    for (size_t d = 0; d < out_->domain.size(); ++d) {
      const int index = out_->domain[d] == 1 ? -1 : static_cast<int>(d);
      if (!out_->reduced[d]) {
        m.push_back(index);
      } else if (keepdim) {
        m.push_back(-1);
      }
    }
    return m;
  }

  // `element`: `v` is needed per element of the domain (before the reductions), else per
  // column (after them).
  absl::Status Visit(const Value* v, const IndexMap& map, bool element) {
    if (!seen_.insert({v, map, element}).second) return absl::OkStatus();
    const Node* p = v->producer();
    if (p == nullptr) {
      if (!element) {
        for (int d : map) {
          if (d >= 0 && out_->reduced[d]) {
            return absl::InvalidArgumentError(
                "column group: a value after the reductions reads along a reduced dim");
          }
        }
      }
      auto key = std::make_pair(v->index(), map);
      auto it = out_->site_index.find(key);
      if (it == out_->site_index.end()) {
        it = out_->site_index.emplace(key, static_cast<int>(out_->sites.size())).first;
        LoadSite site;
        site.input = v->index();
        site.map = map;
        out_->sites.push_back(std::move(site));
        out_->site_per_element.push_back(false);
      }
      if (element) out_->site_per_element[it->second] = true;
      return absl::OkStatus();
    }
    if (p->kind() == OpKind::kConstant) return absl::OkStatus();
    if (graph::IsOnePassReduction(p->kind())) {
      if (element) {
        return absl::InvalidArgumentError(
            "column group: a reduced value is broadcast back over the reduced dims");
      }
      TF_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ColumnDims(*p));
      std::vector<bool> reduced(out_->domain.size(), false);
      for (int64_t d : dims) reduced[d] = true;
      if (p->input(0)->type().sizes != out_->domain || reduced != out_->reduced) {
        return absl::InvalidArgumentError(absl::StrCat(
            "column group: ", graph::OpName(p->kind()), " of ", p->input(0)->type().ToString(),
            " reduces other dims than the group's"));
      }
      if (map != ResultMap(p->IntAttr("keepdim") != 0)) {
        return absl::InvalidArgumentError("column group: a reduced value is broadcast");
      }
      if (reductions_.insert(p).second) out_->reductions.push_back(p);
      return Visit(p->input(0), DomainIdentity(out_->domain), true);
    }
    const graph::OpCategory cat = graph::OpCategoryOf(p->kind());
    if (!graph::IsElementwise(p->kind()) && cat != graph::OpCategory::kLayout) {
      return absl::InvalidArgumentError(
          absl::StrCat("column group: unexpected op ", graph::OpName(p->kind())));
    }
    if (p->kind() == OpKind::kCat) {
      return absl::InvalidArgumentError("column group: cat selects by index; not handled");
    }
    for (int i = 0; i < static_cast<int>(p->inputs().size()); ++i) {
      TF_RETURN_IF_ERROR(Visit(p->input(i), OperandMap(*p, i, map), element));
    }
    return absl::OkStatus();
  }

 private:
  ColumnIndexing* out_;
  std::set<std::tuple<const Value*, IndexMap, bool>> seen_;
  std::set<const Node*> reductions_;
};

}  // namespace

bool IsColumnGroupBody(const graph::Graph& body) {
  for (const auto& n : body.nodes()) {
    if (graph::IsOnePassReduction(n->kind()) && ColumnDims(*n).ok()) return true;
  }
  return false;
}

absl::StatusOr<ColumnIndexing> AnalyzeColumnIndexing(const graph::Graph& body) {
  ColumnIndexing out;
  for (const auto& n : body.nodes()) {
    if (!graph::IsOnePassReduction(n->kind())) continue;
    TF_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ColumnDims(*n));
    out.domain = n->input(0)->type().sizes;
    out.reduced.assign(out.domain.size(), false);
    for (int64_t d : dims) {
      out.reduced[d] = true;
      out.reduced_count *= out.domain[d];
    }
    break;
  }
  if (out.domain.empty()) return absl::InvalidArgumentError("column group: no reduction");
  if (body.outputs().empty()) return absl::InvalidArgumentError("column group without outputs");
  std::vector<int64_t> kept, kept1;
  for (size_t d = 0; d < out.domain.size(); ++d) {
    if (!out.reduced[d]) kept.push_back(out.domain[d]);
    kept1.push_back(out.reduced[d] ? 1 : out.domain[d]);
  }
  ColumnAnalyzer analyzer(&out);
  for (const Value* v : body.outputs()) {
    const std::vector<int64_t>& s = v->type().sizes;
    IndexMap map;
    bool per_column = true;
    if (s == kept) {
      map = analyzer.ResultMap(false);
    } else if (s == kept1) {
      map = analyzer.ResultMap(true);
    } else if (s == out.domain) {
      map = DomainIdentity(out.domain);
      per_column = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "column group: output ", v->type().ToString(), " is neither the domain ",
          graph::TensorType{v->type().dtype, out.domain}.ToString(), " nor one value per column"));
    }
    out.output_per_column.push_back(per_column);
    out.output_maps.push_back(map);
    TF_RETURN_IF_ERROR(analyzer.Visit(v, map, !per_column));
  }
  if (out.reductions.empty()) {
    return absl::InvalidArgumentError("column group: no output depends on a reduction");
  }
  // Body order (the analyzer met them from the outputs).
  std::vector<const Node*> ordered;
  for (const auto& n : body.nodes()) {
    if (std::find(out.reductions.begin(), out.reductions.end(), n.get()) != out.reductions.end()) {
      ordered.push_back(n.get());
    }
  }
  out.reductions = std::move(ordered);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Run-time layout.

std::string ColumnLayout::Signature() const {
  return absl::StrCat("r", reduced_rank, "_k", kept_rank, "_v", vec,
                      index32 ? "_i32_" : "_i64_", AccessLetters(access));
}

std::vector<uint8_t> ColumnLaunch::ParamBlock() const {
  std::vector<int64_t> values = {rows, columns};
  values.insert(values.end(), reduced_sizes.begin(), reduced_sizes.end());
  values.insert(values.end(), kept_sizes.begin(), kept_sizes.end());
  for (const auto& s : strides) values.insert(values.end(), s.begin(), s.end());
  values.insert(values.end(), site_offsets.begin(), site_offsets.end());
  return PackIndexParams(values, layout.index32);
}

namespace {

// Collapses the domain dims `dims` (in order) of every stride list in `all`: size-1 dims go,
// and a dim merges into the previous one where every list allows it. Appends the sizes to
// `sizes` and each list's strides to `out[a]`; a single dim of size 1 where none is left.
void Collapse(const std::vector<int64_t>& domain, const std::vector<int>& dims,
              const std::vector<std::vector<int64_t>>& all, std::vector<int64_t>* sizes,
              std::vector<std::vector<int64_t>>* out) {
  const size_t first = sizes->size();
  for (int d : dims) {
    const int64_t size = domain[d];
    if (size == 1) continue;
    bool merge = sizes->size() > first;
    for (size_t a = 0; a < all.size() && merge; ++a) merge = (*out)[a].back() == all[a][d] * size;
    if (merge) {
      sizes->back() *= size;
      for (size_t a = 0; a < all.size(); ++a) (*out)[a].back() = all[a][d];
    } else {
      sizes->push_back(size);
      for (size_t a = 0; a < all.size(); ++a) (*out)[a].push_back(all[a][d]);
    }
  }
  if (sizes->size() == first) {
    sizes->push_back(1);
    for (size_t a = 0; a < all.size(); ++a) (*out)[a].push_back(0);
  }
}

}  // namespace

ColumnLaunch ComputeColumnLaunch(const ColumnIndexing& indexing,
                                 const std::vector<TensorView>& inputs,
                                 const std::vector<int>& output_element_sizes,
                                 const std::vector<uintptr_t>& output_addresses) {
  const std::vector<int64_t>& domain = indexing.domain;
  const int rank = static_cast<int>(domain.size());
  const size_t nsites = indexing.sites.size();
  // Strides over the domain: the sites', then the domain-shaped outputs' (contiguous).
  std::vector<std::vector<int64_t>> all = DomainStrides(indexing.sites, inputs, rank);
  std::vector<size_t> element_outputs;
  for (size_t o = 0; o < indexing.output_per_column.size(); ++o) {
    if (indexing.output_per_column[o]) continue;
    element_outputs.push_back(o);
    std::vector<int64_t> st(rank, 0);
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      st[d] = domain[d] == 1 ? 0 : stride;
      stride *= domain[d];
    }
    all.push_back(std::move(st));
  }
  std::vector<int> reduced_dims, kept_dims;
  for (int d = 0; d < rank; ++d) (indexing.reduced[d] ? reduced_dims : kept_dims).push_back(d);
  ColumnLaunch out;
  std::vector<std::vector<int64_t>> rstrides(all.size()), kstrides(all.size());
  Collapse(domain, reduced_dims, all, &out.reduced_sizes, &rstrides);
  Collapse(domain, kept_dims, all, &out.kept_sizes, &kstrides);
  out.rows = 1;
  for (int64_t s : out.reduced_sizes) out.rows *= s;
  out.columns = 1;
  for (int64_t s : out.kept_sizes) out.columns *= s;
  const int rr = static_cast<int>(out.reduced_sizes.size());
  const int kr = static_cast<int>(out.kept_sizes.size());
  const std::vector<int64_t> offsets = SiteOffsets(indexing.sites, inputs);
  int widest = 1;
  for (const TensorView& t : inputs) widest = std::max(widest, t.element_size);
  for (int e : output_element_sizes) widest = std::max(widest, e);
  const int vec = std::max(1, 16 / widest);
  bool can_vec = vec > 1 && out.kept_sizes.back() % vec == 0;
  int64_t max_offset = out.rows * out.columns;
  for (size_t a = 0; a < all.size(); ++a) {
    std::vector<int64_t> strides = rstrides[a];
    strides.insert(strides.end(), kstrides[a].begin(), kstrides[a].end());
    const int64_t inner = strides.back();
    int64_t reach = a < nsites ? offsets[a] : 0;
    for (int j = 0; j < rr; ++j) reach += std::abs(strides[j]) * (out.reduced_sizes[j] - 1);
    for (int j = 0; j < kr; ++j) reach += std::abs(strides[rr + j]) * (out.kept_sizes[j] - 1);
    max_offset = std::max(max_offset, reach + 1);
    if (a < nsites) {
      const RowAccess access = inner == 1   ? RowAccess::kContiguous
                               : inner == 0 ? RowAccess::kBroadcast
                                            : RowAccess::kStrided;
      out.layout.access.push_back(access);
      if (access == RowAccess::kStrided) can_vec = false;
      if (access == RowAccess::kContiguous) {
        const TensorView& t = inputs[indexing.sites[a].input];
        const uintptr_t address = t.address + static_cast<uintptr_t>(offsets[a] * t.element_size);
        can_vec &= address % (static_cast<uintptr_t>(vec) * t.element_size) == 0;
        for (size_t j = 0; j + 1 < strides.size(); ++j) can_vec &= strides[j] % vec == 0;
      }
    } else {
      const size_t o = element_outputs[a - nsites];
      can_vec &= output_addresses[o] % (static_cast<uintptr_t>(vec) * output_element_sizes[o]) == 0;
      for (size_t j = 0; j + 1 < strides.size(); ++j) can_vec &= strides[j] % vec == 0;
    }
    out.strides.push_back(std::move(strides));
  }
  for (int s : OffsetSites(indexing.sites)) out.site_offsets.push_back(offsets[s]);
  out.layout.reduced_rank = rr;
  out.layout.kept_rank = kr;
  out.layout.vec = can_vec ? vec : 1;
  out.layout.index32 = max_offset < (int64_t{1} << 30);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Variants.

int64_t ColumnVariant::Tiles(int64_t columns, int vec) const {
  return CeilDiv(CeilDiv(columns, vec), threads_x);
}

std::string ColumnVariant::Signature() const {
  return absl::StrCat("col_x", threads_x, "_y", threads_y, "_s", split);
}

absl::StatusOr<ColumnVariant> ParseColumnVariant(const std::string& signature) {
  std::vector<std::string> parts = absl::StrSplit(signature, '_');
  if (parts.size() != 4 || parts[0] != "col") {
    return absl::InvalidArgumentError(absl::StrCat("bad column variant '", signature, "'"));
  }
  ColumnVariant v;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    int value = 0;
    if (p.size() < 2 || !absl::SimpleAtoi(p.substr(1), &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad column variant '", signature, "'"));
    }
    switch (p[0]) {
      case 'x': v.threads_x = value; break;
      case 'y': v.threads_y = value; break;
      case 's': v.split = value; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("bad column variant '", signature, "'"));
    }
  }
  auto pow2 = [](int x) { return (x & (x - 1)) == 0; };
  if (!pow2(v.threads_x) || !pow2(v.threads_y) || v.block_size() > 1024 || v.threads_x > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("column variant '", signature, "' cannot launch"));
  }
  return v;
}

namespace {

// Each row lane reduces at least this many rows of a split's share.
constexpr int64_t kMinRowsPerLane = 8;

ColumnVariant Shape(int64_t rows, int64_t columns, int vec, const RowDevice& device, int x,
                    int y) {
  ColumnVariant v;
  v.threads_x = x;
  v.threads_y = y;
  // About four blocks per multiprocessor, each row lane reducing enough rows to pay for its
  // partial result.
  const int64_t tiles = v.Tiles(columns, vec);
  const int64_t want = CeilDiv(4LL * device.multiprocessors, tiles);
  const int64_t most = std::max<int64_t>(1, rows / (y * kMinRowsPerLane));
  v.split = static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 1024)));
  return v;
}

}  // namespace

ColumnVariant ChooseColumnVariant(int64_t rows, int64_t columns, int vec, const RowDevice& device) {
  const int x = static_cast<int>(std::min<int64_t>(32, Pow2Ceil(CeilDiv(columns, vec))));
  return Shape(rows, columns, vec, device, x, std::max(1, 256 / x));
}

std::vector<ColumnVariant> ColumnVariantSpace(int64_t rows, int64_t columns, int vec,
                                              const RowDevice& device) {
  const ColumnVariant h = ChooseColumnVariant(rows, columns, vec, device);
  std::vector<ColumnVariant> space = {h};
  auto add = [&](ColumnVariant v) {
    if (std::find(space.begin(), space.end(), v) == space.end()) space.push_back(v);
  };
  const int widest = static_cast<int>(std::min<int64_t>(32, Pow2Ceil(CeilDiv(columns, vec))));
  for (auto [x, y] : {std::pair{32, 4}, std::pair{32, 8}, std::pair{32, 16}, std::pair{16, 16},
                      std::pair{8, 32}}) {
    if (x > widest) continue;
    ColumnVariant v = Shape(rows, columns, vec, device, x, y);
    add(v);
    if (v.split >= 4) {
      v.split /= 4;
      add(v);
    }
  }
  return space;
}

ColumnScratch ColumnScratchFor(const ColumnIndexing& indexing, int64_t columns, int vec,
                               const std::vector<ColumnVariant>& variants) {
  bool wide = false;
  for (const Node* r : indexing.reductions) {
    wide |= graph::ComputeDType(r->output()->type().dtype) == DType::kF64;
  }
  ColumnScratch s;
  for (const ColumnVariant& v : variants) {
    s.counters = std::max(s.counters, v.Tiles(columns, vec));
    if (v.split > 1) {
      s.workspace_bytes = std::max<int64_t>(
          s.workspace_bytes, static_cast<int64_t>(indexing.reductions.size()) * v.split *
                                 columns * (wide ? 8 : 4));
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Emission.

namespace {

class ColumnEmitter {
 public:
  ColumnEmitter(const graph::Graph& body, const ColumnIndexing& ix, const ColumnLayout& layout,
                const ColumnVariant& variant)
      : body_(body), ix_(ix), layout_(layout), v_(variant) {
    I_ = layout.index32 ? "int" : "long long";
    V_ = layout.vec;
    rr_ = layout.reduced_rank;
    kr_ = layout.kept_rank;
    for (size_t o = 0; o < ix.output_per_column.size(); ++o) {
      if (!ix.output_per_column[o]) element_outputs_.push_back(static_cast<int>(o));
    }
    W_ = "float";
    for (const Node* r : ix.reductions) {
      if (graph::ComputeDType(r->output()->type().dtype) == DType::kF64) W_ = "double";
    }
  }

  absl::Status Emit(const std::string& name) {
    const int nsites = static_cast<int>(ix_.sites.size());
    const int nstrided = nsites + static_cast<int>(element_outputs_.size());
    const int nparams = 2 + rr_ + kr_ + nstrided * (rr_ + kr_) +
                        static_cast<int>(OffsetSites(ix_.sites).size());
    w_.Line("// torchfuse column kernel: ", v_.threads_x, " column lanes x ", v_.threads_y,
            " row lanes, layout ", layout_.Signature(), ", ", ix_.reduced_count,
            " elements per column");
    w_.Line("struct TfParams { ", I_, " v[", nparams, "]; };");
    w_.Blank();
    std::string params;
    for (int i = 0; i < body_.num_inputs(); ++i) {
      absl::StrAppend(&params, "const ", StorageTypeName(body_.input(i)->type().dtype),
                      "* __restrict__ in", i, ", ");
    }
    for (size_t o = 0; o < body_.outputs().size(); ++o) {
      absl::StrAppend(&params, StorageTypeName(body_.outputs()[o]->type().dtype),
                      "* __restrict__ out", o, ", ");
    }
    absl::StrAppend(&params, W_, "* __restrict__ ws, unsigned* __restrict__ counters, ",
                    "const TfParams p");
    CudaWriter::Scope kernel(&w_, absl::StrCat("extern \"C\" __global__ void __launch_bounds__(",
                                               v_.block_size(), ") ", name, "(", params, ")"));
    EmitSetup();
    TF_RETURN_IF_ERROR(EmitMainLoop());
    EmitBlockCombine();
    EmitSplitCombine();
    return EmitEpilogue();
  }

  std::string text() const { return w_.str(); }

 private:
  std::string P(int index) const { return absl::StrCat("p.v[", index, "]"); }
  int RSize(int j) const { return 2 + j; }
  int KSize(int j) const { return 2 + rr_ + j; }
  // Stride `j` (reduced dims first, then kept) of strided entity `a` (sites, then the
  // domain-shaped outputs).
  int Stride(int a, int j) const { return 2 + rr_ + kr_ + a * (rr_ + kr_) + j; }
  int Offset(int k) const {
    const int nstrided = static_cast<int>(ix_.sites.size() + element_outputs_.size());
    return 2 + rr_ + kr_ + nstrided * (rr_ + kr_) + k;
  }
  const char* SiteType(int s) const {
    return StorageTypeName(body_.input(ix_.sites[s].input)->type().dtype);
  }
  const char* Acc(int i) const { return ComputeTypeName(ix_.reductions[i]->output()->type().dtype); }

  void EmitSetup() {
    const std::string I = I_;
    w_.Line("const ", I, " M = p.v[0];");
    w_.Line("const ", I, " N = p.v[1];");
    w_.Line("const int tx = threadIdx.x % ", v_.threads_x, ";");
    w_.Line("const int ty = threadIdx.x / ", v_.threads_x, ";");
    w_.Line("const ", I, " tiles = (N / ", V_, " + ", v_.threads_x - 1, ") / ", v_.threads_x, ";");
    w_.Line("const ", I, " tile = blockIdx.x % tiles;");
    w_.Line("const ", I, " split = blockIdx.x / tiles;");
    w_.Line("const ", I, " splits = gridDim.x / tiles;");
    w_.Line("const ", I, " k0 = (tile * ", v_.threads_x, " + tx) * ", V_, ";");
    w_.Line("const bool col_ok = k0 < N;");
    w_.Line("(void)M; (void)ty; (void)split; (void)splits;");
    // The column's kept indices, and every site's and output's offset at row 0.
    w_.Line(I, " kr = col_ok ? k0 : 0;");
    for (int j = kr_ - 1; j >= 1; --j) {
      w_.Line("const ", I, " kd", j, " = kr % ", P(KSize(j)), ";");
      w_.Line("kr /= ", P(KSize(j)), ";");
    }
    w_.Line("const ", I, " kd0 = kr;");
    const std::vector<int> offset_sites = OffsetSites(ix_.sites);
    const int nstrided = static_cast<int>(ix_.sites.size() + element_outputs_.size());
    for (int a = 0; a < nstrided; ++a) {
      std::string sum;
      for (int j = 0; j < kr_; ++j) {
        absl::StrAppend(&sum, j ? " + " : "", "kd", j, " * ", P(Stride(a, rr_ + j)));
      }
      auto it = std::find(offset_sites.begin(), offset_sites.end(), a);
      if (it != offset_sites.end()) {
        absl::StrAppend(&sum, " + ", P(Offset(static_cast<int>(it - offset_sites.begin()))));
      }
      w_.Line("const ", I, " kbase", a, " = ", sum, ";");
    }
    if (v_.threads_y > 1) {
      w_.Line("__shared__ ", W_, " tf_sm[", v_.threads_y, "][", v_.threads_x * V_, "];");
    }
    for (size_t i = 0; i < ix_.reductions.size(); ++i) {
      const ReductionOps ops = ReductionOpsOf(ix_.reductions[i]->kind(), Acc(static_cast<int>(i)));
      w_.Line(Acc(static_cast<int>(i)), " a", i, "[", V_, "];");
      w_.Line("#pragma unroll");
      w_.Line("for (int e = 0; e < ", V_, "; ++e) a", i, "[e] = ", ops.identity, ";");
    }
  }

  ExprEmitter MakeEmitter(bool per_column) {
    return ExprEmitter(
        &w_, KernelFastMath(body_, /*row=*/false),
        [this, per_column](const Value* v, const IndexMap& map) -> std::optional<std::string> {
          const Node* n = v->producer();
          const char* type = ComputeTypeName(v->type().dtype);
          if (n == nullptr) {
            const int s = ix_.site_index.at({v->index(), map});
            const bool lanes = layout_.access[s] == RowAccess::kContiguous;
            if (per_column) {
              return absl::StrCat("tf_cvt<", type, ">(in", ix_.sites[s].input, "[kbase", s,
                                  lanes ? " + e" : "", "])");
            }
            return absl::StrCat("tf_cvt<", type, ">(", lanes ? absl::StrCat("l", s, ".v[e]")
                                                             : absl::StrCat("x", s), ")");
          }
          for (size_t i = 0; i < ix_.reductions.size(); ++i) {
            if (ix_.reductions[i] == n) return absl::StrCat("red", i);
          }
          return std::nullopt;
        });
  }

  absl::Status EmitMainLoop() {
    const std::string I = I_;
    w_.Line("const ", I, " per_split = (M + splits - 1) / splits;");
    w_.Line("const ", I, " r_end = min(M, (split + 1) * per_split);");
    CudaWriter::Scope guard(&w_, "if (col_ok)");
    w_.Line("#pragma unroll 2");
    CudaWriter::Scope loop(&w_, absl::StrCat("for (", I, " r = split * per_split + ty; r < r_end; r += ",
                                             v_.threads_y, ")"));
    if (rr_ == 1) {
      w_.Line("const ", I, " rd0 = r;");
    } else {
      w_.Line(I, " rr = r;");
      for (int j = rr_ - 1; j >= 1; --j) {
        w_.Line("const ", I, " rd", j, " = rr % ", P(RSize(j)), ";");
        w_.Line("rr /= ", P(RSize(j)), ";");
      }
      w_.Line("const ", I, " rd0 = rr;");
    }
    auto offset = [&](int a) {
      std::string sum = absl::StrCat("kbase", a);
      for (int j = 0; j < rr_; ++j) absl::StrAppend(&sum, " + rd", j, " * ", P(Stride(a, j)));
      return sum;
    };
    for (size_t s = 0; s < ix_.sites.size(); ++s) {
      if (!ix_.site_per_element[s]) continue;
      const int in = ix_.sites[s].input;
      if (layout_.access[s] == RowAccess::kContiguous) {
        w_.Line("const TfVec<", SiteType(s), ", ", V_, "> l", s, " = *reinterpret_cast<const TfVec<",
                SiteType(s), ", ", V_, ">*>(in", in, " + ", offset(s), ");");
      } else {
        w_.Line("const ", SiteType(s), " x", s, " = in", in, "[", offset(s), "];");
      }
    }
    for (int o : element_outputs_) {
      w_.Line("TfVec<", StorageTypeName(body_.outputs()[o]->type().dtype), ", ", V_, "> r", o, ";");
    }
    {
      w_.Line("#pragma unroll");
      CudaWriter::Scope lanes(&w_, absl::StrCat("for (int e = 0; e < ", V_, "; ++e)"));
      ExprEmitter em = MakeEmitter(false);
      const IndexMap identity = DomainIdentity(ix_.domain);
      for (size_t i = 0; i < ix_.reductions.size(); ++i) {
        const Node* n = ix_.reductions[i];
        const DType acc = graph::ComputeDType(n->output()->type().dtype);
        TF_ASSIGN_OR_RETURN(std::string x, em.Get(n->input(0), identity, acc));
        const ReductionOps ops = ReductionOpsOf(n->kind(), Acc(static_cast<int>(i)));
        w_.Line("a", i, "[e] = ", ops.Combine(absl::StrCat("a", i, "[e]"), x), ";");
      }
      for (int o : element_outputs_) {
        const Value* v = body_.outputs()[o];
        TF_ASSIGN_OR_RETURN(std::string x, em.Emit(v, ix_.output_maps[o]));
        w_.Line("r", o, ".v[e] = tf_cvt<", StorageTypeName(v->type().dtype), ">(", x, ");");
      }
    }
    const int nsites = static_cast<int>(ix_.sites.size());
    for (size_t k = 0; k < element_outputs_.size(); ++k) {
      const int o = element_outputs_[k];
      w_.Line("*reinterpret_cast<TfVec<", StorageTypeName(body_.outputs()[o]->type().dtype), ", ",
              V_, ">*>(out", o, " + ", offset(nsites + static_cast<int>(k)), ") = r", o, ";");
    }
    return absl::OkStatus();
  }

  // Folds the row lanes' accumulators of every reduction into row lane 0's, in a fixed tree.
  void EmitBlockCombine() {
    if (v_.threads_y == 1) return;
    for (size_t i = 0; i < ix_.reductions.size(); ++i) {
      const ReductionOps ops = ReductionOpsOf(ix_.reductions[i]->kind(), Acc(static_cast<int>(i)));
      w_.Line("__syncthreads();");
      w_.Line("#pragma unroll");
      w_.Line("for (int e = 0; e < ", V_, "; ++e) tf_sm[ty][tx * ", V_, " + e] = a", i, "[e];");
      w_.Line("__syncthreads();");
      {
        w_.Line("#pragma unroll");
        CudaWriter::Scope tree(&w_, absl::StrCat("for (int h = ", v_.threads_y / 2,
                                                 "; h > 0; h /= 2)"));
        {
          CudaWriter::Scope lower(&w_, "if (ty < h)");
          w_.Line("#pragma unroll");
          CudaWriter::Scope lanes(&w_, absl::StrCat("for (int e = 0; e < ", V_, "; ++e)"));
          const std::string mine = absl::StrCat("tf_sm[ty][tx * ", V_, " + e]");
          const std::string other = absl::StrCat("tf_sm[ty + h][tx * ", V_, " + e]");
          w_.Line(mine, " = ", ops.Combine(mine, other), ";");
        }
        w_.Line("__syncthreads();");
      }
      w_.Line("#pragma unroll");
      w_.Line("for (int e = 0; e < ", V_, "; ++e) a", i, "[e] = tf_sm[0][tx * ", V_, " + e];");
    }
  }

  // Split launches: every block leaves its partials in the workspace; the last block of a
  // tile combines them in split order.
  void EmitSplitCombine() {
    CudaWriter::Scope split(&w_, "if (splits > 1)");
    const int n = static_cast<int>(ix_.reductions.size());
    auto slot = [&](int i, const std::string& s) {
      return absl::StrCat("ws[((long long)", i, " * splits + ", s, ") * N + k0 + e]");
    };
    {
      CudaWriter::Scope lead(&w_, "if (ty == 0 && col_ok)");
      for (int i = 0; i < n; ++i) {
        w_.Line("#pragma unroll");
        w_.Line("for (int e = 0; e < ", V_, "; ++e) ", slot(i, "split"), " = a", i, "[e];");
      }
      w_.Line("__threadfence();");
    }
    w_.Line("__shared__ bool tf_last;");
    w_.Line("__syncthreads();");
    w_.Line("if (threadIdx.x == 0) tf_last = atomicAdd(&counters[tile], 1u) == (unsigned)(splits - 1);");
    w_.Line("__syncthreads();");
    w_.Line("if (!tf_last) return;");
    w_.Line("__threadfence();");
    for (int i = 0; i < n; ++i) {
      const ReductionOps ops = ReductionOpsOf(ix_.reductions[i]->kind(), Acc(i));
      w_.Line("#pragma unroll");
      w_.Line("for (int e = 0; e < ", V_, "; ++e) a", i, "[e] = ", ops.identity, ";");
    }
    {
      CudaWriter::Scope guard(&w_, "if (col_ok)");
      CudaWriter::Scope loop(&w_, absl::StrCat("for (", I_, " s = ty; s < splits; s += ",
                                               v_.threads_y, ")"));
      for (int i = 0; i < n; ++i) {
        const ReductionOps ops = ReductionOpsOf(ix_.reductions[i]->kind(), Acc(i));
        w_.Line("#pragma unroll");
        w_.Line("for (int e = 0; e < ", V_, "; ++e) a", i, "[e] = ",
                ops.Combine(absl::StrCat("a", i, "[e]"),
                        absl::StrCat("(", Acc(i), ")__ldcg(&", slot(i, "s"), ")")),
                ";");
      }
    }
    EmitBlockCombine();
    w_.Line("if (threadIdx.x == 0) counters[tile] = 0u;  // ready for the next launch");
  }

  absl::Status EmitEpilogue() {
    bool any = false;
    for (bool c : ix_.output_per_column) any |= c;
    if (!any) return absl::OkStatus();
    CudaWriter::Scope lead(&w_, "if (ty == 0 && col_ok)");
    w_.Line("#pragma unroll");
    CudaWriter::Scope lanes(&w_, absl::StrCat("for (int e = 0; e < ", V_, "; ++e)"));
    for (size_t i = 0; i < ix_.reductions.size(); ++i) {
      const char* acc = Acc(static_cast<int>(i));
      if (ix_.reductions[i]->kind() == OpKind::kMean) {
        w_.Line("const ", acc, " red", i, " = a", i, "[e] / ", acc, "(", ix_.reduced_count, ");");
      } else {
        w_.Line("const ", acc, " red", i, " = a", i, "[e];");
      }
    }
    ExprEmitter em = MakeEmitter(true);
    for (size_t o = 0; o < body_.outputs().size(); ++o) {
      if (!ix_.output_per_column[o]) continue;
      const Value* v = body_.outputs()[o];
      TF_ASSIGN_OR_RETURN(std::string x, em.Emit(v, ix_.output_maps[o]));
      w_.Line("out", o, "[k0 + e] = tf_cvt<", StorageTypeName(v->type().dtype), ">(", x, ");");
    }
    return absl::OkStatus();
  }

  const graph::Graph& body_;
  const ColumnIndexing& ix_;
  const ColumnLayout& layout_;
  const ColumnVariant& v_;
  CudaWriter w_;
  const char* I_;
  const char* W_;
  int V_ = 1;
  int rr_ = 1;
  int kr_ = 1;
  std::vector<int> element_outputs_;
};

}  // namespace

absl::StatusOr<KernelSource> EmitColumnKernel(const graph::Graph& body,
                                              const ColumnIndexing& indexing,
                                              const ColumnLayout& layout,
                                              const ColumnVariant& variant,
                                              const std::string& base_name) {
  if (layout.access.size() != indexing.sites.size()) {
    return absl::InternalError("column emitter: layout does not match the load sites");
  }
  auto pow2 = [](int x) { return x > 0 && (x & (x - 1)) == 0; };
  if (!pow2(variant.threads_x) || !pow2(variant.threads_y) || variant.block_size() > 1024) {
    return absl::InvalidArgumentError("column emitter: lanes must be powers of two, <= 1024");
  }
  const std::string placeholder = "TF_KERNEL_NAME";
  ColumnEmitter emitter(body, indexing, layout, variant);
  TF_RETURN_IF_ERROR(emitter.Emit(placeholder));
  const std::string text = emitter.text();
  const uint64_t h = Fnv1a(text);
  KernelSource out;
  out.name = absl::StrFormat("tf_%s_%s_col_v%d_%08x", base_name,
                             graph::DTypeName(body.outputs()[0]->type().dtype), layout.vec,
                             static_cast<uint32_t>(h ^ (h >> 32)));
  out.source = absl::StrCat(DevicePrelude(), "\n",
                            absl::StrReplaceAll(text, {{placeholder, out.name}}));
  out.block_size = variant.block_size();
  out.hash = Fnv1a(out.source);
  return out;
}

}  // namespace torchfuse::codegen
