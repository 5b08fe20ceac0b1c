#include "codegen_nvrtc/row_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
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

using Key = std::pair<const Value*, IndexMap>;

// Does a value read with `map` vary along the row (dim `row_dim` of the domain)?
bool ElementLevel(const IndexMap& map, int row_dim) {
  return std::find(map.begin(), map.end(), row_dim) != map.end();
}

int64_t Pow2Ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

class RowAnalyzer {
 public:
  explicit RowAnalyzer(RowIndexing* out) : out_(out) {}

  absl::Status Visit(const Value* v, const IndexMap& map) {
    if (!seen_.insert({v, map}).second) return absl::OkStatus();
    const Node* p = v->producer();
    const int row_dim = static_cast<int>(out_->domain.size()) - 1;
    if (p == nullptr) {
      auto key = std::make_pair(v->index(), map);
      if (!out_->site_index.count(key)) {
        out_->site_index[key] = static_cast<int>(out_->sites.size());
        LoadSite site;
        site.input = v->index();
        site.map = map;
        out_->sites.push_back(std::move(site));
        out_->site_per_row.push_back(!ElementLevel(map, row_dim));
      }
      return absl::OkStatus();
    }
    if (p->kind() == OpKind::kConstant) return absl::OkStatus();
    if (graph::IsOnePassReduction(p->kind())) {
      const std::vector<int64_t>& in = p->input(0)->type().sizes;
      auto dims = graph::ReductionDims(p->attrs(), static_cast<int64_t>(in.size()));
      if (in != out_->domain || !dims.ok() ||
          *dims != std::vector<int64_t>{static_cast<int64_t>(in.size()) - 1}) {
        return absl::InvalidArgumentError(
            absl::StrCat("row group: ", graph::OpName(p->kind()), " of ",
                         p->input(0)->type().ToString(), " does not reduce the rows of ",
                         graph::TensorType{p->input(0)->type().dtype, out_->domain}.ToString()));
      }
      // Its value is per row: the outer dims in place, never the row dim.
      IndexMap want = DomainIdentity(out_->domain);
      want.pop_back();
      if (p->IntAttr("keepdim") != 0) want.push_back(-1);
      if (map != want) {
        return absl::InvalidArgumentError(
            "row group: a reduced value is broadcast across rows or along the row");
      }
      if (!reductions_.count(p)) {
        reductions_.insert(p);
        out_->reductions.push_back({p, 0, -1});
      }
      return Visit(p->input(0), DomainIdentity(out_->domain));
    }
    const graph::OpCategory cat = graph::OpCategoryOf(p->kind());
    if (!graph::IsElementwise(p->kind()) && cat != graph::OpCategory::kLayout) {
      return absl::InvalidArgumentError(
          absl::StrCat("row group: unexpected op ", graph::OpName(p->kind())));
    }
    for (int i = 0; i < static_cast<int>(p->inputs().size()); ++i) {
      TF_RETURN_IF_ERROR(Visit(p->input(i), OperandMap(*p, i, map)));
    }
    return absl::OkStatus();
  }

 private:
  RowIndexing* out_;
  std::set<Key> seen_;
  std::set<const Node*> reductions_;
};

// The highest reduction level `v` depends on.
int DependLevel(const Value* v, const std::map<const Node*, int>& level,
                std::map<const Value*, int>* memo) {
  auto it = memo->find(v);
  if (it != memo->end()) return it->second;
  int result = 0;
  const Node* p = v->producer();
  if (p != nullptr) {
    auto l = level.find(p);
    if (l != level.end() && l->second > 0) {
      result = l->second;
    } else {
      for (const Value* in : p->inputs()) result = std::max(result, DependLevel(in, level, memo));
    }
  }
  return (*memo)[v] = result;
}

}  // namespace

bool IsRowGroupBody(const graph::Graph& body) {
  for (const auto& n : body.nodes()) {
    if (graph::IsOnePassReduction(n->kind())) return true;
  }
  return false;
}

absl::StatusOr<RowIndexing> AnalyzeRowIndexing(const graph::Graph& body) {
  RowIndexing out;
  for (const auto& n : body.nodes()) {
    if (graph::IsOnePassReduction(n->kind())) {
      out.domain = n->input(0)->type().sizes;
      break;
    }
  }
  if (out.domain.empty()) {
    return absl::InvalidArgumentError("row group: no reduction over a tensor of rank >= 1");
  }
  if (body.outputs().empty()) return absl::InvalidArgumentError("row group without outputs");
  out.row_length = out.domain.back();
  std::vector<int64_t> outer(out.domain.begin(), out.domain.end() - 1);
  std::vector<int64_t> outer1 = outer;
  outer1.push_back(1);
  RowAnalyzer analyzer(&out);
  for (const Value* v : body.outputs()) {
    const std::vector<int64_t>& s = v->type().sizes;
    if (s == out.domain) {
      out.output_per_row.push_back(false);
      TF_RETURN_IF_ERROR(analyzer.Visit(v, DomainIdentity(out.domain)));
    } else if (s == outer || s == outer1) {
      out.output_per_row.push_back(true);
      TF_RETURN_IF_ERROR(analyzer.Visit(v, DomainIdentity(s)));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "row group: output ", v->type().ToString(), " is neither the domain ",
          graph::TensorType{v->type().dtype, out.domain}.ToString(), " nor one value per row"));
    }
  }
  // Levels, in dependency order: a reduction's level is one more than its input's.
  std::map<const Node*, int> level;
  for (const RowReduction& r : out.reductions) level[r.node] = 0;
  std::vector<const Node*> body_order;
  for (const auto& n : body.nodes()) {
    if (level.count(n.get())) body_order.push_back(n.get());
  }
  for (const Node* n : body_order) {  // body order is topological
    std::map<const Value*, int> memo;
    level[n] = 1 + DependLevel(n->input(0), level, &memo);
  }
  out.reductions.clear();
  for (const Node* n : body_order) out.reductions.push_back({n, level[n], -1});
  std::stable_sort(out.reductions.begin(), out.reductions.end(),
                   [](const RowReduction& a, const RowReduction& b) { return a.level < b.level; });
  for (const RowReduction& r : out.reductions) out.levels = std::max(out.levels, r.level);
  // sum(exp(a - amax(a))): the sum can be computed with the amax, in one pass.
  for (RowReduction& s : out.reductions) {
    if (s.node->kind() != OpKind::kSum) continue;
    const Node* e = s.node->input(0)->producer();
    if (e == nullptr || e->kind() != OpKind::kExp) continue;
    const Node* d = e->input(0)->producer();
    if (d == nullptr || d->kind() != OpKind::kSub) continue;
    const Node* m = d->input(1)->producer();
    if (m == nullptr || m->kind() != OpKind::kAmax || m->input(0) != d->input(0)) continue;
    if (m->output()->type().dtype != s.node->output()->type().dtype) continue;
    for (size_t j = 0; j < out.reductions.size(); ++j) {
      if (out.reductions[j].node == m) s.online_partner = static_cast<int>(j);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Run-time layout.

std::string AccessLetters(const std::vector<RowAccess>& access) {
  std::string s;
  for (RowAccess a : access) {
    switch (a) {
      case RowAccess::kContiguous: s += 'C'; break;
      case RowAccess::kBroadcast: s += 'B'; break;
      case RowAccess::kStrided: s += 'X'; break;
    }
  }
  return s;
}

IndexMap DomainIdentity(const std::vector<int64_t>& sizes) {
  IndexMap m(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) m[i] = sizes[i] == 1 ? -1 : static_cast<int>(i);
  return m;
}

std::string ReductionOps::Combine(const std::string& a, const std::string& b) const {
  return absl::StrReplaceAll(combine, {{"{a}", a}, {"{b}", b}});
}

ReductionOps ReductionOpsOf(OpKind kind, const char* acc) {
  switch (kind) {
    case OpKind::kAmax: return {absl::StrCat("-tf_inf(", acc, "(0))"), "tf_maximum({a}, {b})"};
    case OpKind::kAmin: return {absl::StrCat("tf_inf(", acc, "(0))"), "tf_minimum({a}, {b})"};
    default: return {absl::StrCat(acc, "(0)"), "({a} + {b})"};
  }
}

std::string RowLayout::Signature() const {
  std::string s = absl::StrCat("o", outer_rank, "_v", vec, shifted ? "s" : "",
                               index32 ? "_i32_" : "_i64_",
                               AccessLetters(access));
  if (row_bound == kAnyRowLength) absl::StrAppend(&s, "_nany");
  else if (row_bound > 0) absl::StrAppend(&s, "_nle", row_bound);
  return s;
}

bool ShiftsRows(int64_t row_length, int vec) {
  return vec > 1 && row_length % vec != 0 && row_length >= 8 * vec;
}

int64_t RowLengthBucket(int64_t n) {
  return n > 65536 ? kAnyRowLength : Pow2Ceil(std::max<int64_t>(n, 1));
}

bool RowIndexing::dynamic_row() const { return graph::IsSymbolic(row_length); }

RowIndexing RowIndexing::Bound(const graph::SymbolBinding& binding) const {
  RowIndexing out = *this;
  out.domain = binding.Apply(domain);
  out.row_length = binding.Apply(row_length);
  return out;
}

std::vector<uint8_t> RowLaunch::ParamBlock() const {
  std::vector<int64_t> values = {rows};
  values.insert(values.end(), outer_sizes.begin(), outer_sizes.end());
  for (const auto& s : site_strides) values.insert(values.end(), s.begin(), s.end());
  values.insert(values.end(), site_offsets.begin(), site_offsets.end());
  if (layout.row_bound > 0) values.push_back(row_length);
  return PackIndexParams(values, layout.index32);
}

RowLaunch ComputeRowLaunch(const RowIndexing& indexing, const std::vector<TensorView>& inputs,
                           const std::vector<int>& output_element_sizes,
                           const std::vector<uintptr_t>& output_addresses, bool dynamic_row) {
  const int rank = static_cast<int>(indexing.domain.size());
  const size_t nsites = indexing.sites.size();
  const std::vector<std::vector<int64_t>> est = DomainStrides(indexing.sites, inputs, rank);
  const std::vector<int64_t> offsets = SiteOffsets(indexing.sites, inputs);
  RowLaunch out;
  out.rows = 1;
  std::vector<std::vector<int64_t>> outer_strides(nsites);
  for (int k = 0; k + 1 < rank; ++k) {
    const int64_t size = indexing.domain[k];
    out.rows *= size;
    if (size == 1) continue;
    bool merge = !out.outer_sizes.empty();
    for (size_t s = 0; s < nsites && merge; ++s) {
      merge = outer_strides[s].back() == est[s][k] * size;
    }
    if (merge) {
      out.outer_sizes.back() *= size;
      for (size_t s = 0; s < nsites; ++s) outer_strides[s].back() = est[s][k];
    } else {
      out.outer_sizes.push_back(size);
      for (size_t s = 0; s < nsites; ++s) outer_strides[s].push_back(est[s][k]);
    }
  }
  if (out.outer_sizes.empty()) {
    out.outer_sizes.push_back(1);
    for (size_t s = 0; s < nsites; ++s) outer_strides[s].push_back(0);
  }
  const int outer_rank = static_cast<int>(out.outer_sizes.size());
  const int64_t R = indexing.row_length;
  int widest = 1;
  for (const TensorView& t : inputs) widest = std::max(widest, t.element_size);
  for (int e : output_element_sizes) widest = std::max(widest, e);
  const int vec = std::max(1, 16 / widest);
  bool can_vec = vec > 1 && R % vec == 0;
  int64_t max_offset = out.rows * R;
  for (size_t s = 0; s < nsites; ++s) {
    const int64_t inner = est[s][rank - 1];
    RowAccess a = inner == 1 ? RowAccess::kContiguous
                  : inner == 0 ? RowAccess::kBroadcast
                               : RowAccess::kStrided;
    out.layout.access.push_back(a);
    int64_t reach = offsets[s] + std::abs(inner) * (R - 1);
    for (int k = 0; k < outer_rank; ++k) {
      reach += std::abs(outer_strides[s][k]) * (out.outer_sizes[k] - 1);
    }
    max_offset = std::max(max_offset, reach + 1);
    const TensorView& t = inputs[indexing.sites[s].input];
    if (a == RowAccess::kStrided) can_vec = false;
    if (a == RowAccess::kContiguous) {
      const uintptr_t address = t.address + static_cast<uintptr_t>(offsets[s] * t.element_size);
      can_vec &= address % (static_cast<uintptr_t>(vec) * t.element_size) == 0;
      for (int64_t st : outer_strides[s]) can_vec &= st % vec == 0;
    }
    std::vector<int64_t> strides = outer_strides[s];
    strides.push_back(inner);
    out.site_strides.push_back(std::move(strides));
  }
  bool outputs_aligned = true;
  for (size_t o = 0; o < output_addresses.size(); ++o) {
    outputs_aligned &=
        output_addresses[o] % (static_cast<uintptr_t>(vec) * output_element_sizes[o]) == 0;
  }
  can_vec &= outputs_aligned;
  // Rows that `vec` does not divide: vectors aligned to memory. A row's element i sits at
  // row * R + i in the outputs (contiguous), so a site shares their vectors where its own
  // offset of every row is the same modulo vec: an aligned address and outer strides that
  // match the outputs' modulo vec. Others are read element by element (kStrided, stride 1),
  // as strided sites are.
  bool shifted = false;
  if (!can_vec && ShiftsRows(R, vec) && outputs_aligned) {
    std::vector<int64_t> out_strides(outer_rank);
    int64_t stride = R;
    for (int k = outer_rank - 1; k >= 0; --k) {
      out_strides[k] = stride;
      stride *= out.outer_sizes[k];
    }
    std::vector<bool> follows(nsites, false);
    for (size_t s = 0; s < nsites; ++s) {
      if (out.layout.access[s] != RowAccess::kContiguous) continue;
      const TensorView& t = inputs[indexing.sites[s].input];
      const uintptr_t address = t.address + static_cast<uintptr_t>(offsets[s] * t.element_size);
      bool f = address % (static_cast<uintptr_t>(vec) * t.element_size) == 0;
      for (int k = 0; k < outer_rank; ++k) {
        f &= ((outer_strides[s][k] - out_strides[k]) % vec + vec) % vec == 0;
      }
      follows[s] = f;
      shifted |= f;
    }
    for (size_t s = 0; s < nsites && shifted; ++s) {
      if (out.layout.access[s] == RowAccess::kContiguous && !follows[s]) {
        out.layout.access[s] = RowAccess::kStrided;
      }
    }
  }
  for (int s : OffsetSites(indexing.sites)) out.site_offsets.push_back(offsets[s]);
  out.layout.outer_rank = outer_rank;
  out.layout.vec = can_vec || shifted ? vec : 1;
  out.layout.shifted = shifted;
  out.layout.index32 = max_offset < (int64_t{1} << 30);
  out.row_length = R;
  if (dynamic_row) out.layout.row_bound = RowLengthBucket(R);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Variants.

const char* RowStrategyName(RowStrategy s) {
  switch (s) {
    case RowStrategy::kWarp: return "warp";
    case RowStrategy::kBlock: return "block";
    case RowStrategy::kLooped: return "looped";
    case RowStrategy::kCluster: return "cluster";
  }
  return "?";
}

absl::StatusOr<RowStrategy> ParseRowStrategy(const std::string& name) {
  for (RowStrategy s : {RowStrategy::kWarp, RowStrategy::kBlock, RowStrategy::kLooped,
                        RowStrategy::kCluster}) {
    if (name == RowStrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown row strategy '", name, "' (warp, block, looped, cluster)"));
}

int RowVariant::ChunksPerThread(int64_t row_length, int vec) const {
  const int64_t chunks = CeilDiv(row_length, vec);
  const int64_t per_block = CeilDiv(chunks, strategy == RowStrategy::kCluster ? cluster : 1);
  // Saturated: rows of any length (kAnyRowLength) need more chunks than an int holds.
  return static_cast<int>(std::min<int64_t>(CeilDiv(per_block, threads), 1 << 30));
}

int64_t RowVariant::GridSize(int64_t rows) const {
  switch (strategy) {
    case RowStrategy::kWarp: return CeilDiv(rows, rows_per_block);
    case RowStrategy::kBlock:
    case RowStrategy::kLooped: return rows;
    case RowStrategy::kCluster: return rows * cluster;
  }
  return rows;
}

std::string RowVariant::Signature() const {
  std::string s;
  switch (strategy) {
    case RowStrategy::kWarp: s = absl::StrCat("warp_t", threads, "_r", rows_per_block); break;
    case RowStrategy::kBlock: s = absl::StrCat("block_t", threads); break;
    case RowStrategy::kLooped: s = absl::StrCat("looped_t", threads, "_u", unroll); break;
    case RowStrategy::kCluster: s = absl::StrCat("cluster_t", threads, "_c", cluster); break;
  }
  if (!keep && strategy != RowStrategy::kLooped) s += "_nokeep";
  if (l2_hints) s += "_l2";
  if (stage) s += "_sm";
  return s;
}

absl::StatusOr<RowVariant> ParseRowVariant(const std::string& signature) {
  std::vector<std::string> parts = absl::StrSplit(signature, '_');
  TF_ASSIGN_OR_RETURN(RowStrategy strategy, ParseRowStrategy(parts[0]));
  RowVariant v;
  v.strategy = strategy;
  v.rows_per_block = 1;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    int value = 0;
    if (p == "nokeep") {
      v.keep = false;
      continue;
    }
    if (p == "l2") {
      v.l2_hints = true;
      continue;
    }
    if (p == "sm") {
      v.stage = true;
      continue;
    }
    if (p.size() < 2 || !absl::SimpleAtoi(p.substr(1), &value) || value < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad row variant '", signature, "'"));
    }
    switch (p[0]) {
      case 't': v.threads = value; break;
      case 'r': v.rows_per_block = value; break;
      case 'u': v.unroll = value; break;
      case 'c': v.cluster = value; break;
      default: return absl::InvalidArgumentError(absl::StrCat("bad row variant '", signature, "'"));
    }
  }
  const bool warp = strategy == RowStrategy::kWarp;
  if ((warp && (v.threads > 32 || 32 % v.threads != 0)) ||
      (!warp && (v.threads < 32 || v.threads > 1024 || v.threads % 32 != 0)) ||
      v.block_size() > 1024 || v.cluster > 8 ||
      ((v.l2_hints || v.stage) && strategy != RowStrategy::kLooped)) {
    return absl::InvalidArgumentError(absl::StrCat("row variant '", signature, "' cannot launch"));
  }
  return v;
}

bool RowVariantFits(const RowVariant& v, int64_t row_length, int vec, const RowDevice& device) {
  if (v.strategy == RowStrategy::kCluster && device.arch < 90) return false;
  if ((v.l2_hints || v.stage) && v.strategy != RowStrategy::kLooped) return false;
  if (v.stage && row_length >= kAnyRowLength) return false;
  return v.strategy == RowStrategy::kLooped ||
         v.ChunksPerThread(row_length, vec) <= kMaxRowChunksPerThread;
}

RowVariant ChooseRowVariant(int64_t row_length, int vec, int64_t rows, const RowDevice& device,
                            std::optional<RowStrategy> forced) {
  const int64_t nc = CeilDiv(row_length, vec);
  // Block sizes and cluster shapes from a sweep of every variant on an H200 (bench --sweep):
  // about 16 elements per thread, 64 to 512 threads a block; 256-thread blocks in clusters
  // of up to 8 for rows too long for one block's registers.
  auto warp = [&] {
    RowVariant v;
    v.strategy = RowStrategy::kWarp;
    v.threads = static_cast<int>(std::min<int64_t>(32, Pow2Ceil(nc)));
    v.rows_per_block = std::max(1, 128 / v.threads);
    return v;
  };
  auto block = [&] {
    RowVariant v;
    v.strategy = RowStrategy::kBlock;
    const int64_t wanted = Pow2Ceil(CeilDiv(row_length, 16));
    v.threads = static_cast<int>(std::clamp<int64_t>(wanted, 64, 512));
    // Rows too long for 16 elements a thread in 512 threads: past 8 chunks a thread, 1024
    // threads where that brings it to 8. A thread keeping 16 vector chunks (and their f32
    // values between passes) spills, and its unrolled body takes NVRTC the longest to
    // compile. Softmax bf16 1024x65536 tuned to block_t1024 in every run on an H200
    // (block_t512 2.7 % slower), and the heuristic's kernel compiles in a first call.
    // Shorter rows keep ~16 elements a thread (16 chunks of one element where rows are read
    // element by element).
    if (wanted > 512 && v.ChunksPerThread(row_length, vec) > 8) {
      RowVariant wide = v;
      wide.threads = 1024;
      if (wide.ChunksPerThread(row_length, vec) <= 8) v = wide;
    }
    return v;
  };
  auto looped = [&] {
    RowVariant v;
    v.strategy = RowStrategy::kLooped;
    v.threads = static_cast<int>(std::clamp<int64_t>(Pow2Ceil(CeilDiv(nc, 8)), 32, 256));
    v.unroll = 2;
    return v;
  };
  auto cluster = [&](int size) {
    RowVariant v;
    v.strategy = RowStrategy::kCluster;
    v.cluster = size;
    v.threads = static_cast<int>(std::clamp<int64_t>(Pow2Ceil(CeilDiv(nc, 4 * size)), 32, 256));
    return v;
  };
  auto fits = [&](const RowVariant& v) { return RowVariantFits(v, row_length, vec, device); };
  // The smallest cluster whose blocks hold at most 8 chunks a thread.
  int cluster_size = 2;
  while (cluster_size < 8 && cluster(cluster_size).ChunksPerThread(row_length, vec) > 8) {
    cluster_size *= 2;
  }
  if (forced) {
    RowVariant v;
    switch (*forced) {
      case RowStrategy::kWarp: v = warp(); break;
      case RowStrategy::kBlock: v = block(); break;
      case RowStrategy::kLooped: v = looped(); break;
      case RowStrategy::kCluster: v = cluster(cluster_size); break;
    }
    if (fits(v)) return v;
    if (*forced == RowStrategy::kBlock) {
      v.threads = 1024;  // the most a block has
      if (fits(v)) return v;
    }
    return looped();
  }
  if (nc <= 128) return warp();
  const RowVariant b = block();
  if (fits(b)) {
    // Few rows: spread each over a cluster so that more SMs read.
    if (device.arch >= 90 && nc >= 2048 && rows * 2 <= device.multiprocessors) {
      const int64_t spread = std::max<int64_t>(1, device.multiprocessors / std::max<int64_t>(rows, 1));
      int size = 2;
      while (size * 2 <= spread && size < 8) size *= 2;
      return cluster(size);
    }
    // A row that fills a 512-thread block at 8 chunks a thread (f32 16384): 1024 threads of 2
    // chunks a step, the row's second read kept in L2 (sm_80 on). Softmax f32 4096x16384 on
    // an H100: 181.9-182.3 us against block_t512's 183.5 (Inductor 181.5-181.7); on an H200
    // the same order (row_variants_h100.md, row_variants_h200.md).
    if (device.arch >= 80 && b.threads == 512 && b.ChunksPerThread(row_length, vec) == 8) {
      RowVariant v = looped();  // 2 chunks a step
      v.threads = 1024;
      v.l2_hints = true;
      return v;
    }
    return b;
  }
  RowVariant c = cluster(cluster_size);
  if (fits(c) && c.ChunksPerThread(row_length, vec) <= 8) return c;
  return looped();
}

bool RowVariantIdles(const RowVariant& v, int64_t row_length, int vec) {
  const int64_t nc = CeilDiv(row_length, vec);
  const int64_t threads =
      int64_t{v.threads} * (v.strategy == RowStrategy::kCluster ? std::max(v.cluster, 1) : 1);
  if (threads / 2 < nc) return false;
  switch (v.strategy) {
    case RowStrategy::kWarp:
      return v.threads > 4;  // the space's smallest warp variant
    case RowStrategy::kBlock:
      return v.threads > 64;  // the smallest block
    case RowStrategy::kLooped:  // a block of as many threads holds the row and reads it once
    case RowStrategy::kCluster:  // so does a cluster of half the blocks, or one block
      return true;
  }
  return false;
}

std::vector<RowVariant> RowVariantSpace(int64_t row_length, int vec, int64_t rows,
                                        const RowDevice& device) {
  std::vector<RowVariant> space = {ChooseRowVariant(row_length, vec, rows, device)};
  auto add = [&](RowVariant v) {
    if (!RowVariantFits(v, row_length, vec, device)) return;
    if (RowVariantIdles(v, row_length, vec)) return;
    if (std::find(space.begin(), space.end(), v) == space.end()) space.push_back(v);
  };
  const int64_t nc = CeilDiv(row_length, vec);
  if (nc <= 512) {
    for (int t : {4, 8, 16, 32}) {
      RowVariant v;
      v.strategy = RowStrategy::kWarp;
      v.threads = t;
      v.rows_per_block = 128 / t;
      add(v);
    }
  }
  for (int t : {64, 128, 256, 512, 1024}) {
    RowVariant v;
    v.strategy = RowStrategy::kBlock;
    v.threads = t;
    add(v);
  }
  // Recomputing instead of keeping pays only where registers are short: the largest blocks.
  for (int t : {512, 1024}) {
    RowVariant v;
    v.strategy = RowStrategy::kBlock;
    v.threads = t;
    v.keep = false;
    add(v);
  }
  auto add_looped = [&](int threads, int unroll, bool l2_hints) {
    RowVariant v;
    v.strategy = RowStrategy::kLooped;
    v.threads = threads;
    v.unroll = unroll;
    v.l2_hints = l2_hints;
    add(v);
  };
  // 512 threads of one chunk a step: the fastest for vocabulary rows (50257, f32 and bf16
  // outputs) in a sweep of every variant on an H100.
  for (auto [t, u] :
       {std::pair{256, 2}, std::pair{512, 4}, std::pair{1024, 2}, std::pair{512, 1}}) {
    add_looped(t, u, /*l2_hints=*/false);
  }
  // Looped kernels read a row twice or more while their outputs stream past: with L2 hints
  // the later reads hit L2. bf16 vocabulary rows [4096, 50257] on an H200: log_softmax to f32
  // is fastest at 1024 threads of 2 chunks (62.0 % of copy, 58.1 % for the unhinted 512 of 1),
  // softmax to bf16 at 512 of 1 (57.4 %, unhinted 50.3 %). Shorter rows gain too where the
  // kernel is bound by memory: softmax f32 [4096, 16384] 1024 of 2 and 512 of 4 at 96.6–96.7 %
  // (Inductor's 96.7 %; the block kernel in registers 94.2 %, unhinted 512 of 4 79.3 %), rms
  // norm f32 [8192, 4096] 512 of 2 at 93.6 % (block 90.5 %). A step spans at most a row.
  // 1024 threads of 4 chunks, later on an H200: the log_softmax 88.3 % (1024 of 2: 82.5 %), where
  // softmax to bf16 is slower (56 %, against 76.7 % for 1024 of 2; registers, most likely).
  if (row_length >= 4096) {
    for (auto [t, u] : {std::pair{256, 2}, std::pair{512, 2}, std::pair{512, 4}, std::pair{1024, 2},
                        std::pair{1024, 4}}) {
      if (int64_t{t} * u <= nc) add_looped(t, u, /*l2_hints=*/true);
    }
  }
  // By elements: a bf16 row of 50257 is 6283 chunks of 8.
  if (row_length >= 32768) add_looped(512, 1, /*l2_hints=*/true);
  if (nc >= 1024) {
    for (int t : {256, 512}) {
      for (int c : {2, 4, 8}) {
        RowVariant v;
        v.strategy = RowStrategy::kCluster;
        v.threads = t;
        v.cluster = c;
        add(v);
      }
    }
  }
  return space;
}

// ---------------------------------------------------------------------------------------------
// Emission.

namespace {

// Which reductions each pass computes, what each pass reads, and what is kept between passes.
struct PassPlan {
  std::vector<std::vector<int>> reductions;  // per reduction pass
  std::vector<std::set<int>> sites;          // per pass (last: the output pass), element sites
  std::vector<std::vector<Key>> roots;       // per pass: the element values its loop computes
  std::map<Key, int> reused;                 // value -> pass that computes and keeps it
  int passes() const { return static_cast<int>(reductions.size()) + 1; }
};

// Keeping a value between passes pays where it saves compute, not for casts and views of
// what is in registers anyway.
bool WorthKeeping(const Node* n) {
  return n != nullptr && graph::IsElementwise(n->kind()) && n->kind() != OpKind::kCast;
}

PassPlan PlanPasses(const graph::Graph& body, const RowIndexing& ix, bool online, bool keep,
                    const std::vector<RowAccess>& access) {
  PassPlan plan;
  const int row_dim = static_cast<int>(ix.domain.size()) - 1;
  for (int level = 1; level <= ix.levels; ++level) {
    std::vector<int> list;
    for (size_t i = 0; i < ix.reductions.size(); ++i) {
      const RowReduction& r = ix.reductions[i];
      const bool paired = online && r.online_partner >= 0;
      if (!paired && r.level == level) list.push_back(static_cast<int>(i));
      if (paired && ix.reductions[r.online_partner].level == level) {
        list.push_back(static_cast<int>(i));
      }
    }
    if (!list.empty()) plan.reductions.push_back(std::move(list));
  }
  plan.sites.resize(plan.passes());
  std::map<Key, int> computed;
  std::set<int> loaded;
  for (int p = 0; p < plan.passes(); ++p) {
    std::vector<Key> roots;
    if (p + 1 < plan.passes()) {
      for (int i : plan.reductions[p]) {
        const RowReduction& r = ix.reductions[i];
        if (online && r.online_partner >= 0) continue;  // reads its partner's input
        roots.push_back({r.node->input(0), DomainIdentity(ix.domain)});
      }
    } else {
      for (size_t o = 0; o < body.outputs().size(); ++o) {
        if (!ix.output_per_row[o]) roots.push_back({body.outputs()[o], DomainIdentity(ix.domain)});
      }
    }
    std::set<Key> visited;
    std::function<void(const Key&)> walk = [&](const Key& key) {
      const Node* n = key.first->producer();
      if (n == nullptr) {
        const int s = ix.site_index.at({key.first->index(), key.second});
        if (ix.site_per_row[s] || access[s] == RowAccess::kBroadcast) return;
        if (!keep || !loaded.count(s)) plan.sites[p].insert(s);
        return;
      }
      if (n->kind() == OpKind::kConstant || graph::IsOnePassReduction(n->kind())) return;
      auto c = computed.find(key);
      if (keep && c != computed.end() && c->second < p && ElementLevel(key.second, row_dim) &&
          WorthKeeping(n)) {
        plan.reused[key] = c->second;
        return;
      }
      if (!visited.insert(key).second) return;
      for (int i = 0; i < static_cast<int>(n->inputs().size()); ++i) {
        walk({n->input(i), OperandMap(*n, i, key.second)});
      }
    };
    for (const Key& k : roots) walk(k);
    plan.roots.push_back(std::move(roots));
    for (const Key& k : visited) computed.emplace(k, p);
    for (int s : plan.sites[p]) loaded.insert(s);
  }
  return plan;
}

// Does site `s` read other elements for each row (not one row shared by all of them, as a
// layer norm's weight)? Only such reads take L2 eviction hints or are staged.
bool SiteReadsEachRow(const RowIndexing& ix, int s) {
  const int row_dim = static_cast<int>(ix.domain.size()) - 1;
  for (int d : ix.sites[s].map) {
    if (d >= 0 && d < row_dim && ix.domain[d] != 1) return true;
  }
  return false;
}

// The sites a staged looped kernel keeps in shared memory, with their byte offsets there (16
// bytes aligned), and the bytes in all: vector sites that read each row and that more than
// one pass of `plan` reads.
std::map<int, int64_t> StagedSites(const graph::Graph& body, const RowIndexing& ix,
                                   const RowLayout& layout, const PassPlan& plan,
                                   int64_t* bytes) {
  std::map<int, int64_t> offsets;
  *bytes = 0;
  const int64_t chunks = CeilDiv(layout.ChunkSpan(ix.row_length), layout.vec);
  for (int s = 0; s < static_cast<int>(ix.sites.size()); ++s) {
    if (layout.access[s] != RowAccess::kContiguous || !SiteReadsEachRow(ix, s)) continue;
    int passes = 0;
    for (const std::set<int>& read : plan.sites) passes += static_cast<int>(read.count(s));
    if (passes < 2) continue;
    offsets[s] = *bytes;
    const int64_t site_bytes =
        chunks * layout.vec * graph::DTypeSize(body.input(ix.sites[s].input)->type().dtype);
    *bytes += CeilDiv(site_bytes, 16) * 16;
  }
  return offsets;
}

class RowEmitter {
 public:
  RowEmitter(const graph::Graph& body, const RowIndexing& ix, const RowLayout& layout,
             const RowVariant& variant)
      : body_(body), ix_(ix), layout_(layout), v_(variant) {
    I_ = layout.index32 ? "int" : "long long";
    vec_ = layout.vec;
    dynamic_ = ix.dynamic_row();
    // A symbolic row's length and chunk count are read at run time (row_n, nc); register
    // strategies hold chunks for the longest row of the bucket.
    shifted_ = layout.shifted;
    const int64_t longest = layout.ChunkSpan(dynamic_ ? layout.row_bound : ix.row_length);
    row_n_ = dynamic_ ? "row_n" : absl::StrCat(ix.row_length);
    nc_ = dynamic_ || shifted_ ? "nc" : absl::StrCat(CeilDiv(ix.row_length, vec_));
    registers_ = variant.strategy != RowStrategy::kLooped;
    // Looped kernels fold an (amax, sum of exp) pair in one pass; register strategies hold
    // the row and reduce it pass by pass. The plan and the reduction code both follow this.
    online_ = !registers_;
    const bool keep = registers_ && variant.keep;
    k_ = registers_ ? variant.ChunksPerThread(longest, vec_) : variant.unroll;
    plan_ = PlanPasses(body, ix, online_, keep, layout.access);
    if (variant.stage && !registers_ && !dynamic_) {
      staged_ = StagedSites(body, ix, layout, plan_, &staged_bytes_);
    }
  }

  int64_t staged_bytes() const { return staged_bytes_; }

  absl::Status Emit(const std::string& name) {
    const int nparams = FirstParamAfterOffsets() + (dynamic_ ? 1 : 0);
    w_.Line("// torchfuse row kernel: ", RowStrategyName(v_.strategy), " ", v_.Signature(),
            ", layout ", layout_.Signature(), ", row length ",
            !dynamic_                              ? absl::StrCat(ix_.row_length)
            : layout_.row_bound == kAnyRowLength ? std::string("a parameter")
                                                   : absl::StrCat("a parameter, at most ",
                                                                  layout_.row_bound));
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
    absl::StrAppend(&params, "const TfParams p");
    std::string attrs = absl::StrCat("__launch_bounds__(", v_.block_size(), ")");
    if (v_.strategy == RowStrategy::kCluster) {
      absl::StrAppend(&attrs, " __cluster_dims__(", v_.cluster, ", 1, 1)");
    }
    CudaWriter::Scope kernel(&w_, absl::StrCat("extern \"C\" __global__ void ", attrs, " ", name,
                                               "(", params, ")"));
    EmitRowSetup();
    for (size_t p = 0; p < plan_.reductions.size(); ++p) {
      TF_RETURN_IF_ERROR(EmitReductionPass(static_cast<int>(p)));
    }
    TF_RETURN_IF_ERROR(EmitOutputPass());
    if (v_.strategy == RowStrategy::kCluster) {
      w_.Line("tf_cluster_sync();  // no block leaves while others read its shared memory");
    }
    return absl::OkStatus();
  }

  std::string text() const { return w_.str(); }

 private:
  // RowLaunch::ParamBlock's order: rows, outer sizes, each site's strides, the offset sites'
  // base offsets, then a symbolic row's length.
  std::string ParamIndexOfStride(int site, int k) const {
    return absl::StrCat(1 + layout_.outer_rank + site * (layout_.outer_rank + 1) + k);
  }
  int FirstOffsetParam() const {
    return 1 + layout_.outer_rank + static_cast<int>(ix_.sites.size()) * (layout_.outer_rank + 1);
  }
  int FirstParamAfterOffsets() const {
    return FirstOffsetParam() + static_cast<int>(OffsetSites(ix_.sites).size());
  }

  const char* SiteType(int s) const {
    return StorageTypeName(body_.input(ix_.sites[s].input)->type().dtype);
  }

  bool SiteInRegisters(int s) const {
    return !ix_.site_per_row[s] && layout_.access[s] != RowAccess::kBroadcast;
  }

  void EmitRowSetup() {
    const std::string I = I_;
    w_.Line("const ", I, " rows = p.v[0];");
    switch (v_.strategy) {
      case RowStrategy::kWarp:
        w_.Line("const int lane = threadIdx.x % ", v_.threads, ";");
        w_.Line("const ", I, " row_index = (", I, ")blockIdx.x * ", v_.rows_per_block,
                " + threadIdx.x / ", v_.threads, ";");
        w_.Line("const bool row_ok = row_index < rows;");
        w_.Line("const ", I, " row = row_ok ? row_index : 0;");
        break;
      case RowStrategy::kBlock:
      case RowStrategy::kLooped:
        w_.Line("const int lane = threadIdx.x;");
        w_.Line("const ", I, " row = blockIdx.x;");
        w_.Line("const bool row_ok = true;");
        break;
      case RowStrategy::kCluster:
        w_.Line("const int lane = threadIdx.x;");
        w_.Line("const unsigned rank = tf_cluster_rank();");
        w_.Line("const ", I, " row = blockIdx.x / ", v_.cluster, ";");
        w_.Line("const bool row_ok = true;");
        break;
    }
    w_.Line("(void)rows; (void)row_ok; (void)lane;");
    if (!staged_.empty()) {
      // The staged row (RowVariant::stage): dynamic shared memory of staged_bytes_.
      w_.Line("extern __shared__ TfVec<unsigned int, 4> tf_stage[];");
      for (const auto& [site, offset] : staged_) {
        const std::string vt = absl::StrCat("TfVec<", SiteType(site), ", ", vec_, ">");
        w_.Line(vt, "* const stage", site, " = reinterpret_cast<", vt,
                "*>(reinterpret_cast<unsigned char*>(tf_stage) + ", offset, ");");
      }
    }
    if (v_.l2_hints) {
      w_.Line("const unsigned long long l2_keep = tf_l2_keep_policy();");
      w_.Line("(void)l2_keep;");
    }
    if (dynamic_) w_.Line("const ", I, " row_n = p.v[", FirstParamAfterOffsets(), "];");
    if (shifted_) {
      // The row starts `sh` elements into a vector of the outputs (row * row_n modulo vec).
      w_.Line("const int sh = (int)(row % ", vec_, " * (", row_n_, " % ", vec_, ") % ", vec_, ");");
      w_.Line("const ", I, " nc = (", row_n_, " + sh + ", vec_ - 1, ") / ", vec_, ";");
    } else if (dynamic_) {
      w_.Line("const ", I, " nc = row_n / ", vec_, ";  // the vector width divides the row");
    }
    // The row's offset in every site.
    const int orank = layout_.outer_rank;
    if (orank == 1) {
      w_.Line("const ", I, " od0 = row;");
    } else {
      w_.Line(I, " rem = row;");
      for (int k = orank - 1; k >= 1; --k) {
        w_.Line("const ", I, " od", k, " = rem % p.v[", 1 + k, "];");
        w_.Line("rem /= p.v[", 1 + k, "];");
      }
      w_.Line("const ", I, " od0 = rem;");
    }
    // Sites that read through a slice add a base offset, the parameters after the strides.
    const std::vector<int> offset_sites = OffsetSites(ix_.sites);
    for (size_t s = 0; s < ix_.sites.size(); ++s) {
      std::string sum;
      for (int k = 0; k < orank; ++k) {
        absl::StrAppend(&sum, k ? " + " : "", "od", k, " * p.v[", ParamIndexOfStride(s, k), "]");
      }
      auto it = std::find(offset_sites.begin(), offset_sites.end(), static_cast<int>(s));
      if (it != offset_sites.end()) {
        absl::StrAppend(&sum, " + p.v[", FirstOffsetParam() + (it - offset_sites.begin()), "]");
      }
      w_.Line("const ", I, " base", s, " = ", sum, ";");
      if (!SiteInRegisters(static_cast<int>(s))) {
        w_.Line("const ", SiteType(s), " x", s, " = in", ix_.sites[s].input, "[base", s, "];");
      }
    }
    // Register strategies: each thread's chunks of the row, and the values kept between passes.
    if (registers_) {
      for (size_t s = 0; s < ix_.sites.size(); ++s) {
        if (!SiteInRegisters(static_cast<int>(s))) continue;
        bool used = false;
        for (const auto& set : plan_.sites) used |= set.count(static_cast<int>(s)) > 0;
        if (used) w_.Line("TfVec<", SiteType(s), ", ", vec_, "> l", s, "[", k_, "];");
      }
      int slot = 0;
      for (const auto& [key, pass] : plan_.reused) {
        const std::string name = absl::StrCat("kept", slot++);
        kept_[key] = name;
        w_.Line(ComputeTypeName(key.first->type().dtype), " ", name, "[", k_ * vec_, "];");
      }
    }
  }

  // The chunk index (in vectors from the row start) of the thread's k-th chunk.
  std::string Chunk(const std::string& k) const {
    switch (v_.strategy) {
      case RowStrategy::kWarp:
      case RowStrategy::kBlock:
        return absl::StrCat(k, " * ", v_.threads, " + lane");
      case RowStrategy::kCluster: {
        const int64_t per_block = static_cast<int64_t>(k_) * v_.threads;
        return absl::StrCat("(int)rank * ", per_block, " + ", k, " * ", v_.threads, " + lane");
      }
      case RowStrategy::kLooped:
        return absl::StrCat("c0 + ", k, " * ", v_.threads);
    }
    return "?";
  }

  std::string Valid(const std::string& c) const {
    std::string cond = absl::StrCat(c, " < ", nc_);
    if (v_.strategy == RowStrategy::kWarp) cond = absl::StrCat("row_ok && ", cond);
    return cond;
  }

  // A whole vector of site `s` at `pointer` (an element pointer expression) read in pass
  // pass_: with l2_hints, kept in L2 where a later pass reads it again from memory, else
  // streamed.
  std::string LoadVector(int s, const std::string& pointer) const {
    const std::string vector = absl::StrCat("reinterpret_cast<const TfVec<", SiteType(s), ", ",
                                            vec_, ">*>(", pointer, ")");
    if (!v_.l2_hints || !SiteReadsEachRow(ix_, s)) return absl::StrCat("*", vector);
    if (!staged_.count(s) && ReadAfter(s)) {
      return absl::StrCat("tf_load_keep(", vector, ", l2_keep)");
    }
    return absl::StrCat("tf_load_stream(", vector, ")");
  }

  // Does a pass before pass_ read site `s` (a staged site is then read from shared memory)?
  bool ReadBefore(int s) const { return ReadIn(s, 0, pass_); }
  // Does a pass after pass_ read site `s`?
  bool ReadAfter(int s) const { return ReadIn(s, pass_ + 1, plan_.passes()); }
  bool ReadIn(int s, int first_pass, int end_pass) const {
    for (int q = first_pass; q < end_pass; ++q) {
      if (plan_.sites[q].count(s)) return true;
    }
    return false;
  }

  // The statement that stores vector `value` of type `vector_type` at `pointer`.
  std::string StoreVector(const std::string& vector_type, const std::string& pointer,
                          const std::string& value) const {
    const std::string at = absl::StrCat("reinterpret_cast<", vector_type, "*>(", pointer, ")");
    if (v_.l2_hints) return absl::StrCat("tf_store_stream(", at, ", ", value, ");");
    return absl::StrCat("*", at, " = ", value, ";");
  }

  void EmitLoads(const std::set<int>& sites, const std::string& kvar) {
    for (int s : sites) {
      const bool staged = staged_.count(s) > 0;
      if (staged && ReadBefore(s)) {
        w_.Line("l", s, "[", kvar, "] = stage", s, "[c];");
        continue;
      }
      EmitLoadFromMemory(s, kvar);
      // The first read of a staged site leaves its chunks in shared memory, partial ones
      // (zeros outside the row) too: each thread reads back the chunks it left there.
      if (staged) w_.Line("stage", s, "[c] = l", s, "[", kvar, "];");
    }
  }

  void EmitLoadFromMemory(int s, const std::string& kvar) {
    const int in = ix_.sites[s].input;
    if (shifted_) {
      // Whole chunks of contiguous sites as one vector; element by element for sites not
      // aligned with the outputs and where the chunk leaves the row (zeros there, never used).
      const bool contiguous = layout_.access[s] == RowAccess::kContiguous;
      const std::string vector_load = absl::StrCat(
          "l", s, "[", kvar, "] = ", LoadVector(s, absl::StrCat("in", in, " + base", s, " + i0")), ";");
      if (contiguous && whole_) {
        w_.Line(vector_load);
        return;
      }
      std::unique_ptr<CudaWriter::Scope> partial;
      if (contiguous) {
        w_.Line("if (full) ", vector_load);
        partial = std::make_unique<CudaWriter::Scope>(&w_, "else");
      }
      w_.Line("#pragma unroll");
      CudaWriter::Scope loop(&w_, absl::StrCat("for (int e = 0; e < ", vec_, "; ++e)"));
      w_.Line("const ", I_, " i = i0 + e;");
      const std::string element = absl::StrCat(
          "in", in, "[base", s, " + i",
          contiguous ? "" : absl::StrCat(" * p.v[", ParamIndexOfStride(s, layout_.outer_rank), "]"), "]");
      if (whole_) {
        w_.Line("l", s, "[", kvar, "].v[e] = ", element, ";");
      } else {
        w_.Line("l", s, "[", kvar, "].v[e] = i >= 0 && i < ", row_n_, " ? ", element, " : ",
                SiteType(s), "{};");
      }
      return;
    }
    if (layout_.access[s] == RowAccess::kContiguous) {
      w_.Line("l", s, "[", kvar, "] = ",
              LoadVector(s, absl::StrCat("in", in, " + base", s, " + (", I_, ")c * ", vec_)), ";");
    } else {  // strided: vec == 1
      w_.Line("l", s, "[", kvar, "].v[0] = in", in, "[base", s, " + (", I_, ")c * p.v[",
              ParamIndexOfStride(s, layout_.outer_rank), "]];");
    }
  }

  // Whether every row reads the same elements of site `s` (a weight, a bias): its map indexes
  // no domain dim but the row's, so its chunks stay in L2 after the first rows read them.
  bool SharedAcrossRows(int s) const {
    const int row_dim = static_cast<int>(ix_.domain.size()) - 1;
    for (int d : ix_.sites[s].map.dims) {
      if (d >= 0 && d != row_dim) return false;
    }
    return true;
  }

  // Opens the loop over a thread's chunks; `body` writes one chunk's work (c is in scope).
  // Register strategies: loads of `load_sites` first, all chunks, then the work; with
  // `shared_in_body`, the sites every row shares are loaded chunk by chunk inside the work's
  // loop instead. Loaded up front, ptxas keeps all their chunks live from the kernel's start
  // (it hoists those loads above the reductions' barriers): layer norm bf16 over rows of 4096
  // took 64 registers a thread that way, 39 this way, and more blocks fit an SM.
  // Looped strategies: `open_step(chunks)` and `close_step(chunks)` write what comes before and
  // after the work of each step of whole chunks (a reduction folding the step's chunks at once).
  absl::Status ChunkLoop(const std::set<int>& load_sites,
                         const std::function<absl::Status()>& body,
                         bool shared_in_body = false,
                         const std::function<absl::Status(int)>& open_step = nullptr,
                         const std::function<absl::Status(int)>& close_step = nullptr) {
    // for each of the thread's `chunks` chunks c (skipping those past the row unless whole_):
    // `inner`.
    auto each_chunk_of = [&](int chunks, const std::function<absl::Status()>& inner) {
      w_.Line("#pragma unroll");
      CudaWriter::Scope loop(&w_, absl::StrCat("for (int k = 0; k < ", chunks, "; ++k)"));
      w_.Line("const int c = ", Chunk("k"), ";");
      std::unique_ptr<CudaWriter::Scope> guard;
      if (!whole_) guard = std::make_unique<CudaWriter::Scope>(&w_, absl::StrCat("if (", Valid("c"), ")"));
      if (shifted_) {
        // The chunk's first element in the row, and whether all of it is in the row.
        w_.Line("const ", I_, " i0 = (", I_, ")c * ", vec_, " - sh;");
        if (whole_) {
          w_.Line("(void)i0;");
        } else {
          w_.Line("const bool full = i0 >= 0 && i0 + ", vec_, " <= ", row_n_, ";");
          w_.Line("(void)full;");
        }
      }
      return inner();
    };
    auto each_chunk = [&](const std::function<absl::Status()>& inner) {
      return each_chunk_of(k_, inner);
    };
    // `first`: loaded for all chunks before the work; `late`: inside the work's loop.
    std::set<int> first, late;
    for (int s : load_sites) {
      (registers_ && shared_in_body && SharedAcrossRows(s) ? late : first).insert(s);
    }
    auto loads = [&] {
      EmitLoads(first, "k");
      return absl::OkStatus();
    };
    if (registers_) {
      if (!first.empty()) TF_RETURN_IF_ERROR(each_chunk(loads));
      return each_chunk([&]() -> absl::Status {
        EmitLoads(late, "k");
        return body();
      });
    }
    // Looped: steps of k_ chunks a thread over the chunks that are whole and in the row (all
    // of them but a shifted row's first and last), with no bounds or whole-chunk test a chunk,
    // then the rest of those a chunk at a time, then a shifted row's two end chunks, tested
    // element by element. With this and HoistRowValues, a vocabulary log_softmax ([4096, 50257]
    // bf16 to f32) went from 294 M to 204 M warp instructions under ncu on an H200.
    auto step = [&](int chunks) -> absl::Status {
      for (int s : load_sites) w_.Line("TfVec<", SiteType(s), ", ", vec_, "> l", s, "[", chunks, "];");
      if (!first.empty()) TF_RETURN_IF_ERROR(each_chunk_of(chunks, loads));
      if (whole_ && open_step) TF_RETURN_IF_ERROR(open_step(chunks));
      TF_RETURN_IF_ERROR(each_chunk_of(chunks, body));
      if (whole_ && close_step) TF_RETURN_IF_ERROR(close_step(chunks));
      return absl::OkStatus();
    };
    const int64_t threads = v_.threads;
    const std::string end = shifted_ ? absl::StrCat("(", nc_, " - 1)") : nc_;
    {
      CudaWriter::Scope chunks(&w_, "");
      w_.Line("int c0 = lane", shifted_ ? " + 1" : "", ";");
      whole_ = true;
      {
        CudaWriter::Scope loop(&w_, absl::StrCat("for (; c0 + ", (k_ - 1) * threads, " < ", end,
                                                 "; c0 += ", threads * k_, ")"));
        TF_RETURN_IF_ERROR(step(k_));
      }
      if (k_ > 1) {
        CudaWriter::Scope loop(&w_, absl::StrCat("for (; c0 < ", end, "; c0 += ", threads, ")"));
        TF_RETURN_IF_ERROR(step(1));
      }
      whole_ = false;
    }
    if (!shifted_) return absl::OkStatus();
    CudaWriter::Scope ends(&w_, absl::StrCat("if (lane == 0 || (lane == ", threads - 1, " && ",
                                             nc_, " > 1))"));
    w_.Line("const int c0 = lane == 0 ? 0 : ", nc_, " - 1;");
    return step(1);
  }

  // Values every element of a row shares that the loop of pass pass_ would otherwise compute
  // at each element: those computed from reductions of earlier passes, per-row reads and
  // constants alone (log(sum) of a log_softmax, rsqrt(var + eps) of a norm). They are
  // computed once, here, before the loop. ptxas does not hoist them out of the branches a
  // chunk takes: a log_softmax over vocabulary rows computed its log's polynomial, and tested
  // its special cases element by element, in every chunk.
  absl::Status HoistRowValues(const std::vector<Key>& roots) {
    const int row_dim = static_cast<int>(ix_.domain.size()) - 1;
    std::map<Key, bool> memo;
    std::function<bool(const Value*, const IndexMap&)> shared = [&](const Value* v,
                                                                    const IndexMap& map) {
      auto it = memo.find({v, map});
      if (it != memo.end()) return it->second;
      const Node* n = v->producer();
      bool r = false;
      if (ElementLevel(map, row_dim)) {
        r = false;
      } else if (n == nullptr) {
        auto site = ix_.site_index.find({v->index(), map});
        r = site != ix_.site_index.end() && !SiteInRegisters(site->second);
      } else if (graph::IsOnePassReduction(n->kind())) {
        r = reduced_.count(n) > 0;
      } else if (n->kind() == OpKind::kConstant) {
        r = true;
      } else if (n->kind() != OpKind::kCat &&
                 (graph::IsElementwise(n->kind()) ||
                  graph::OpCategoryOf(n->kind()) == graph::OpCategory::kLayout)) {
        r = true;
        for (int k = 0; r && k < static_cast<int>(n->inputs().size()); ++k) {
          r = shared(n->input(k), OperandMap(*n, k, map));
        }
      }
      return memo[{v, map}] = r;
    };
    // The largest shared values the loop reads, in the order the walk meets them.
    std::set<Key> seen;
    std::vector<Key> hoist;
    std::function<void(const Value*, const IndexMap&)> walk = [&](const Value* v,
                                                                  const IndexMap& map) {
      if (!seen.insert({v, map}).second) return;
      const Node* n = v->producer();
      if (n == nullptr || graph::IsOnePassReduction(n->kind()) ||
          n->kind() == OpKind::kConstant || n->kind() == OpKind::kCat) {
        return;
      }
      if (hoisted_.count({v, map})) return;
      if (shared(v, map)) {
        hoist.push_back({v, map});
        return;
      }
      auto kept = plan_.reused.find({v, map});
      if (kept != plan_.reused.end() && kept->second < pass_) return;  // read back, not computed
      for (int k = 0; k < static_cast<int>(n->inputs().size()); ++k) {
        walk(n->input(k), OperandMap(*n, k, map));
      }
    };
    for (const Key& root : roots) walk(root.first, root.second);
    if (hoist.empty()) return absl::OkStatus();
    ExprEmitter em = MakeEmitter(pass_, /*per_row=*/true);
    for (const Key& key : hoist) {
      TF_ASSIGN_OR_RETURN(std::string name, em.Emit(key.first, key.second));
      hoisted_[key] = name;
    }
    return absl::OkStatus();
  }

  // An expression emitter for pass `pass` at element (k, e), or for per-row values.
  ExprEmitter MakeEmitter(int pass, bool per_row) {
    return ExprEmitter(
        &w_, KernelFastMath(body_, /*row=*/true),
        [this, pass, per_row](const Value* v, const IndexMap& map) -> std::optional<std::string> {
          auto hoisted = hoisted_.find({v, map});
          if (hoisted != hoisted_.end()) return hoisted->second;
          const Node* n = v->producer();
          const char* type = ComputeTypeName(v->type().dtype);
          if (n == nullptr) {
            const int s = ix_.site_index.at({v->index(), map});
            if (!SiteInRegisters(s)) return absl::StrCat("tf_cvt<", type, ">(x", s, ")");
            if (per_row) return std::string("tf_element_value_in_a_row_expression");
            return absl::StrCat("tf_cvt<", type, ">(tf_elem(l", s, "[k], e))");
          }
          if (graph::IsOnePassReduction(n->kind())) return reduced_.at(n);
          auto kept = plan_.reused.find({v, map});
          if (!per_row && kept != plan_.reused.end() && kept->second < pass) {
            return absl::StrCat(kept_.at({v, map}), "[k * ", vec_, " + e]");
          }
          return std::nullopt;
        },
        [this, pass](const Value* v, const IndexMap& map, const std::string& name) {
          auto kept = plan_.reused.find({v, map});
          if (registers_ && kept != plan_.reused.end() && kept->second == pass) {
            w_.Line(kept_.at({v, map}), "[k * ", vec_, " + e] = ", name, ";");
          }
        });
  }

  absl::Status EmitReductionPass(int pass) {
    pass_ = pass;
    const std::vector<int>& list = plan_.reductions[pass];
    w_.Line("// pass ", pass + 1, ": ", [&] {
      std::string s;
      for (int i : list) absl::StrAppend(&s, s.empty() ? "" : ", ", graph::OpName(ix_.reductions[i].node->kind()));
      return s;
    }());
    std::map<int, ReductionOps> ops;
    for (int i : list) {
      const Node* n = ix_.reductions[i].node;
      const char* acc = ComputeTypeName(n->output()->type().dtype);
      ops[i] = ReductionOpsOf(n->kind(), acc);
      w_.Line(acc, " a", i, " = ", ops[i].identity, ";");
    }
    auto paired = [&](int i) { return online_ && ix_.reductions[i].online_partner >= 0; };
    // The sum that rides along with amax `i`, or -1.
    auto partner_of = [&](int i) {
      for (int j : list) {
        if (paired(j) && ix_.reductions[j].online_partner == i) return j;
      }
      return -1;
    };
    {
      // One chunk's elements folded into the accumulators; `guarded`: only those in the row.
      // A whole chunk's online (max, sum) pairs fold as one vector (tf_online_add_n): its
      // elements are gathered in `on<i>` first. A looped kernel's steps of whole chunks gather
      // the step's chunks and fold them once (step_gather): one rescale and one test of the
      // max for the 8 elements of 2 chunks of 4 instead of 2.
      bool step_gather = false;
      auto gathered_in = [&](int i, bool whole_chunks) {
        return whole_chunks && !paired(i) && partner_of(i) >= 0;
      };
      // Folds the gathered elements of amax `i` and its sum (a whole chunk, or a step's chunks).
      auto fold_gathered = [&](int i) {
        w_.Line("tf_online_add_n(a", i, ", a", partner_of(i), ", on", i, ");");
      };
      auto declare_gather = [&](int elements) {
        for (int i : list) {
          if (!gathered_in(i, vec_ > 1 || step_gather)) continue;
          w_.Line(ComputeTypeName(ix_.reductions[i].node->output()->type().dtype), " on", i, "[",
                  elements, "];");
        }
      };
      auto fold = [&](bool guarded) -> absl::Status {
        const bool whole_chunks = !guarded && (vec_ > 1 || step_gather);
        auto gathered = [&](int i) { return gathered_in(i, whole_chunks); };
        if (!step_gather) declare_gather(vec_);
        {
          w_.Line("#pragma unroll");
          CudaWriter::Scope loop(&w_, absl::StrCat("for (int e = 0; e < ", vec_, "; ++e)"));
          std::unique_ptr<CudaWriter::Scope> in_row;
          if (guarded) {
            in_row = std::make_unique<CudaWriter::Scope>(
                &w_, absl::StrCat("if (i0 + e >= 0 && i0 + e < ", row_n_, ")"));
          }
          ExprEmitter em = MakeEmitter(pass, false);
          for (int i : list) {
            if (paired(i)) continue;
            const Node* n = ix_.reductions[i].node;
            const DType acc = graph::ComputeDType(n->output()->type().dtype);
            TF_ASSIGN_OR_RETURN(std::string x,
                                em.Get(n->input(0), DomainIdentity(ix_.domain), acc));
            const int j = partner_of(i);
            if (gathered(i)) {
              w_.Line("on", i, "[", step_gather ? absl::StrCat("k * ", vec_, " + e") : "e", "] = ", x, ";");
            } else if (j >= 0) {
              w_.Line("tf_online_add(a", i, ", a", j, ", ", x, ");");
            } else {
              w_.Line("a", i, " = ", ops[i].Combine(absl::StrCat("a", i), x), ";");
            }
          }
        }
        if (step_gather) return absl::OkStatus();
        for (int i : list) {
          if (gathered(i)) fold_gathered(i);
        }
        return absl::OkStatus();
      };
      // Up to 8 elements a step: 16 (a bf16 softmax's 2 chunks of 8) took registers enough to
      // halve the blocks an SM holds (57 % of copy bandwidth against 75 % chunk by chunk).
      auto open_step = [&](int chunks) -> absl::Status {
        step_gather = chunks * vec_ <= 8;
        if (step_gather) declare_gather(chunks * vec_);
        return absl::OkStatus();
      };
      auto close_step = [&](int chunks) -> absl::Status {
        if (!step_gather) return absl::OkStatus();
        for (int i : list) {
          if (gathered_in(i, true)) fold_gathered(i);
        }
        step_gather = false;
        return absl::OkStatus();
      };
      TF_RETURN_IF_ERROR(HoistRowValues(plan_.roots[pass]));
      absl::Status st = ChunkLoop(plan_.sites[pass], [&]() -> absl::Status {
        if (!shifted_ || whole_) return fold(false);
        // Whole chunks, nearly all of them, fold without a test per element.
        {
          CudaWriter::Scope whole(&w_, "if (full)");
          TF_RETURN_IF_ERROR(fold(false));
        }
        CudaWriter::Scope partial(&w_, "else");
        return fold(true);
      }, /*shared_in_body=*/false, open_step, close_step);
      TF_RETURN_IF_ERROR(st);
    }
    // Across the row's threads: lanes of a warp, warps of a block, blocks of a cluster.
    const int warp_lanes = std::min(v_.threads, 32);
    // Folds into each accumulator the one `other(name)` reads from another thread or block.
    auto combine_lanes = [&](const std::function<std::string(const std::string&)>& other) {
      for (int i : list) {
        if (paired(i)) continue;
        const std::string ai = absl::StrCat("a", i);
        const int j = partner_of(i);
        if (j >= 0) {
          const std::string aj = absl::StrCat("a", j);
          w_.Line("tf_online_merge(", ai, ", ", aj, ", ", other(ai), ", ", other(aj), ");");
        } else {
          w_.Line(ai, " = ", ops[i].Combine(ai, other(ai)), ";");
        }
      }
    };
    // Folds each accumulator across `width` lanes (a power of two) by xor shuffles.
    auto shuffle_fold = [&](int width) {
      w_.Line("#pragma unroll");
      CudaWriter::Scope loop(&w_, absl::StrCat("for (int o = ", width / 2, "; o > 0; o /= 2)"));
      combine_lanes([](const std::string& a) { return absl::StrCat("tf_shfl_xor(", a, ", o)"); });
    };
    if (warp_lanes > 1) shuffle_fold(warp_lanes);
    if (v_.threads > 32) {
      const int warps = v_.threads / 32;
      for (int i : list) {
        const char* acc = ComputeTypeName(ix_.reductions[i].node->output()->type().dtype);
        w_.Line("__shared__ ", acc, " sm", i, "[", warps, "];");
        w_.Line("if (lane % 32 == 0) sm", i, "[lane / 32] = a", i, ";");
      }
      w_.Line("__syncthreads();");
      // The warps' partials: plain reductions are folded by each thread, one after another
      // (independent shared-memory reads, a short chain of cheap folds). Online (max, sum)
      // pairs (an exponential in each fold) are read across a warp's lanes and combined by
      // shuffles, log2(warps) folds a thread: from 16 warps by the first warp alone, which
      // leaves the total in shared memory behind a second barrier; from 4 to 15 by every warp,
      // without the barrier. Vocabulary rows on an H200, 32 warps: every thread folding every
      // partial then every warp by shuffles took the log_softmax from 62 to 70 % of copy
      // bandwidth (e00df11); with the kernels of 39b25ce, every warp 82.6 %, the first warp
      // alone 83.4 %, and the softmax 66.5 % and 75.4 %. For every warp, lane l reads partial
      // l % span (span: warps to a power of two, identities past the warps), so every group
      // of span lanes folds them all and every lane ends with the total.
      bool online_pair = false;
      for (int i : list) online_pair |= partner_of(i) >= 0;
      const int span = static_cast<int>(Pow2Ceil(warps));
      if (online_pair && warps >= 16) {
        {
          CudaWriter::Scope first(&w_, "if (lane < 32)");
          for (int i : list) {
            w_.Line("a", i, " = lane < ", warps, " ? sm", i, "[lane] : ", ops[i].identity, ";");
          }
          shuffle_fold(span);
          CudaWriter::Scope lane0(&w_, "if (lane == 0)");
          for (int i : list) w_.Line("sm", i, "[0] = a", i, ";");
        }
        w_.Line("__syncthreads();");
        for (int i : list) w_.Line("a", i, " = sm", i, "[0];");
      } else if (online_pair && warps >= 4) {
        const std::string wl = absl::StrCat("lane % ", span);
        for (int i : list) {
          if (span == warps) {
            w_.Line("a", i, " = sm", i, "[", wl, "];");
          } else {
            w_.Line("a", i, " = ", wl, " < ", warps, " ? sm", i, "[", wl, "] : ", ops[i].identity,
                    ";");
          }
        }
        shuffle_fold(span);
      } else {
        for (int i : list) w_.Line("a", i, " = sm", i, "[0];");
        w_.Line("#pragma unroll");
        CudaWriter::Scope loop(&w_, absl::StrCat("for (int w = 1; w < ", warps, "; ++w)"));
        combine_lanes([](const std::string& a) { return absl::StrCat("sm", a.substr(1), "[w]"); });
      }
    }
    if (v_.strategy == RowStrategy::kCluster) {
      for (int i : list) {
        const char* acc = ComputeTypeName(ix_.reductions[i].node->output()->type().dtype);
        w_.Line("__shared__ ", acc, " cs", i, ";");
        w_.Line("if (lane == 0) cs", i, " = a", i, ";");
      }
      w_.Line("tf_cluster_sync();");
      for (int i : list) w_.Line("a", i, " = tf_cluster_load(&cs", i, ", 0);");
      w_.Line("#pragma unroll");
      CudaWriter::Scope loop(&w_, absl::StrCat("for (unsigned r = 1; r < ", v_.cluster, "; ++r)"));
      combine_lanes(
          [](const std::string& a) { return absl::StrCat("tf_cluster_load(&cs", a.substr(1), ", r)"); });
    }
    for (int i : list) {
      const Node* n = ix_.reductions[i].node;
      const char* acc = ComputeTypeName(n->output()->type().dtype);
      const std::string name = absl::StrCat("red", i);
      if (n->kind() == OpKind::kMean) {
        w_.Line("const ", acc, " ", name, " = a", i, " / ", acc, "(", row_n_, ");");
      } else if (partner_of(i) >= 0) {
        // A NaN element leaves the online max at the others' max and the sum NaN
        // (tf_online_add_n): amax is NaN there.
        const int j = partner_of(i);
        w_.Line("const ", acc, " ", name, " = a", j, " != a", j, " ? a", j, " : a", i, ";");
      } else if (paired(i)) {
        // exp(x - max) is NaN throughout a row whose max is infinite, so is its sum.
        const int m = ix_.reductions[i].online_partner;
        w_.Line("const ", acc, " ", name, " = (a", m, " == tf_inf(", acc, "(0)) || a", m,
                " == -tf_inf(", acc, "(0))) ? tf_nan(", acc, "(0)) : a", i, ";");
      } else {
        w_.Line("const ", acc, " ", name, " = a", i, ";");
      }
      reduced_[n] = name;
    }
    return absl::OkStatus();
  }

  absl::Status EmitOutputPass() {
    const int pass = plan_.passes() - 1;
    pass_ = pass;
    const int nout = static_cast<int>(body_.outputs().size());
    w_.Line("// output pass");
    bool any_element = false;
    for (int o = 0; o < nout; ++o) any_element |= !ix_.output_per_row[o];
    if (any_element) {
      TF_RETURN_IF_ERROR(HoistRowValues(plan_.roots[pass]));
      absl::Status st = ChunkLoop(plan_.sites[pass], [&]() -> absl::Status {
        for (int o = 0; o < nout; ++o) {
          if (ix_.output_per_row[o]) continue;
          w_.Line("TfVec<", StorageTypeName(body_.outputs()[o]->type().dtype), ", ", vec_, "> r",
                  o, ";");
        }
        {
          w_.Line("#pragma unroll");
          CudaWriter::Scope loop(&w_, absl::StrCat("for (int e = 0; e < ", vec_, "; ++e)"));
          ExprEmitter em = MakeEmitter(pass, false);
          for (int o = 0; o < nout; ++o) {
            if (ix_.output_per_row[o]) continue;
            const Value* v = body_.outputs()[o];
            TF_ASSIGN_OR_RETURN(std::string x, em.Emit(v, DomainIdentity(ix_.domain)));
            w_.Line("r", o, ".v[e] = tf_cvt<", StorageTypeName(v->type().dtype), ">(", x, ");");
          }
        }
        for (int o = 0; o < nout; ++o) {
          if (ix_.output_per_row[o]) continue;
          const std::string vt =
              absl::StrCat("TfVec<", StorageTypeName(body_.outputs()[o]->type().dtype), ", ", vec_, ">");
          if (!shifted_) {
            w_.Line(StoreVector(vt, absl::StrCat("out", o, " + row * ", row_n_, " + (", I_,
                                                 ")c * ", vec_),
                                absl::StrCat("r", o)));
            continue;
          }
          const std::string store =
              StoreVector(vt, absl::StrCat("out", o, " + row * ", row_n_, " + i0"), absl::StrCat("r", o));
          if (whole_) {
            w_.Line(store);
            continue;
          }
          w_.Line("if (full) ", store);
          CudaWriter::Scope partial(&w_, "else");
          w_.Line("#pragma unroll");
          CudaWriter::Scope loop(&w_, absl::StrCat("for (int e = 0; e < ", vec_, "; ++e)"));
          w_.Line("if (i0 + e >= 0 && i0 + e < ", row_n_, ") out", o, "[row * ", row_n_,
                  " + i0 + e] = r", o, ".v[e];");
        }
        return absl::OkStatus();
      }, /*shared_in_body=*/true);
      TF_RETURN_IF_ERROR(st);
    }
    bool any_row = false;
    for (int o = 0; o < nout; ++o) any_row |= ix_.output_per_row[o];
    if (any_row) {
      std::string who = "row_ok && lane == 0";
      if (v_.strategy == RowStrategy::kCluster) who += " && rank == 0";
      CudaWriter::Scope guard(&w_, absl::StrCat("if (", who, ")"));
      ExprEmitter em = MakeEmitter(pass, true);
      for (int o = 0; o < nout; ++o) {
        if (!ix_.output_per_row[o]) continue;
        const Value* v = body_.outputs()[o];
        TF_ASSIGN_OR_RETURN(std::string x, em.Emit(v, DomainIdentity(v->type().sizes)));
        w_.Line("out", o, "[row] = tf_cvt<", StorageTypeName(v->type().dtype), ">(", x, ");");
      }
    }
    return absl::OkStatus();
  }

  const graph::Graph& body_;
  const RowIndexing& ix_;
  const RowLayout& layout_;
  const RowVariant& v_;
  CudaWriter w_;
  const char* I_;
  int vec_ = 1;
  bool dynamic_ = false;
  bool shifted_ = false;  // layout_.shifted: partial chunks at each row's ends
  std::string row_n_;  // the row length: a constant, or row_n
  std::string nc_;     // chunks of vec_ elements in a row: a constant, or nc
  bool registers_ = true;
  bool online_ = false;  // online (amax, sum) pairs: PlanPasses and the reduction code
  bool whole_ = false;  // the chunks being written are whole and in the row (no tests)
  int k_ = 1;  // chunks per thread (register strategies) or per step (looped)
  int pass_ = 0;  // the pass being written
  PassPlan plan_;
  std::map<int, int64_t> staged_;  // staged sites: byte offset in the staged row
  int64_t staged_bytes_ = 0;
  std::map<Key, std::string> kept_;
  std::map<const Node*, std::string> reduced_;
  std::map<Key, std::string> hoisted_;  // per-row values computed before a pass's loop
};

}  // namespace

absl::StatusOr<KernelSource> EmitRowKernel(const graph::Graph& body, const RowIndexing& indexing,
                                           const RowLayout& layout, const RowVariant& variant,
                                           const std::string& base_name) {
  if (layout.access.size() != indexing.sites.size()) {
    return absl::InternalError("row emitter: layout does not match the load sites");
  }
  if (!indexing.dynamic_row() && layout.vec > 1 && !layout.shifted &&
      indexing.row_length % layout.vec != 0) {
    return absl::InternalError("row emitter: vector width does not divide the row");
  }
  if (indexing.dynamic_row() != (layout.row_bound > 0)) {
    return absl::InternalError("row emitter: a symbolic row length needs a layout bound");
  }
  if (indexing.dynamic_row() && variant.strategy != RowStrategy::kLooped &&
      (layout.row_bound == kAnyRowLength ||
       variant.ChunksPerThread(layout.ChunkSpan(layout.row_bound), layout.vec) >
           kMaxRowChunksPerThread)) {
    return absl::InvalidArgumentError(
        "row emitter: rows of any length need the looped strategy");
  }
  if ((variant.l2_hints || variant.stage) && variant.strategy != RowStrategy::kLooped) {
    return absl::InvalidArgumentError(
        "row emitter: L2 hints and staged rows are for the looped strategy");
  }
  if (variant.stage && indexing.dynamic_row()) {
    return absl::InvalidArgumentError("row emitter: staged rows need a static row length");
  }
  if (variant.strategy == RowStrategy::kWarp && (variant.threads > 32 || 32 % variant.threads)) {
    return absl::InvalidArgumentError("row emitter: warp strategy needs 1..32 threads per row");
  }
  if (variant.strategy != RowStrategy::kWarp && (variant.threads < 32 || variant.threads % 32)) {
    return absl::InvalidArgumentError("row emitter: threads per block must be a multiple of 32");
  }
  const std::string placeholder = "TF_KERNEL_NAME";
  RowEmitter emitter(body, indexing, layout, variant);
  TF_RETURN_IF_ERROR(emitter.Emit(placeholder));
  const std::string text = emitter.text();
  const uint64_t h = Fnv1a(text);
  KernelSource out;
  out.name = absl::StrFormat("tf_%s_%s_%s_v%d_%08x", base_name,
                             graph::DTypeName(body.outputs()[0]->type().dtype),
                             RowStrategyName(variant.strategy), layout.vec,
                             static_cast<uint32_t>(h ^ (h >> 32)));
  out.source = absl::StrCat(DevicePrelude(), "\n",
                            absl::StrReplaceAll(text, {{placeholder, out.name}}));
  out.block_size = variant.block_size();
  out.dynamic_smem = static_cast<int>(emitter.staged_bytes());
  out.hash = Fnv1a(out.source);
  return out;
}

int64_t RowStagedBytes(const graph::Graph& body, const RowIndexing& indexing,
                       const RowLayout& layout) {
  if (indexing.dynamic_row()) return -1;
  const PassPlan plan =
      PlanPasses(body, indexing, /*online=*/true, /*keep=*/false, layout.access);
  int64_t bytes = 0;
  StagedSites(body, indexing, layout, plan, &bytes);
  return bytes;
}

int64_t MaxRowStagedBytes(int arch) {
  // Opt-in shared memory per block by SM version, less 1 KiB for the reductions' own arrays.
  int64_t most = 48 * 1024;
  if (arch >= 90 && arch < 120) {
    most = 227 * 1024;
  } else if (arch == 80 || arch == 87) {
    most = 163 * 1024;
  } else if (arch == 86 || arch == 89 || arch >= 120) {
    most = 99 * 1024;
  } else if (arch == 70 || arch == 72) {
    most = 96 * 1024;
  } else if (arch == 75) {
    most = 64 * 1024;
  }
  return most - 1024;
}

bool RowVariantFitsKernel(const RowVariant& v, const graph::Graph& body,
                          const RowIndexing& indexing, const RowLayout& layout,
                          const RowDevice& device) {
  const int64_t n = indexing.dynamic_row() ? layout.row_bound : indexing.row_length;
  if (!RowVariantFits(v, layout.ChunkSpan(n), layout.vec, device)) return false;
  if (!v.stage) return true;
  const int64_t bytes = RowStagedBytes(body, indexing, layout);
  return bytes >= 0 && bytes <= MaxRowStagedBytes(device.arch);
}

}  // namespace torchfuse::codegen
