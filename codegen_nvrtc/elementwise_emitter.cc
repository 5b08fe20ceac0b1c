#include "codegen_nvrtc/elementwise_emitter.h"

#include <algorithm>
#include <functional>
#include <map>

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
using graph::Value;


absl::StatusOr<KernelSource> EmitElementwiseKernel(const graph::Graph& body,
                                                   const GroupIndexing& indexing,
                                                   const KernelLayout& layout,
                                                   const std::string& base_name, int block_size) {
  const int nin = body.num_inputs();
  const int nout = static_cast<int>(body.outputs().size());
  const size_t nsites = indexing.sites.size();
  if (layout.access.size() != nsites) {
    return absl::InternalError("elementwise emitter: layout does not match the load sites");
  }
  const int r = layout.rank;
  const int vec = layout.vec;
  const char* I = layout.index32 ? "int" : "long long";
  // Sites that read through a slice add a base offset, the parameters after the strides.
  const std::vector<int> offset_sites = OffsetSites(indexing.sites);
  std::map<int, int> offset_param;
  for (size_t k = 0; k < offset_sites.size(); ++k) {
    offset_param[offset_sites[k]] = 1 + r + static_cast<int>(nsites) * r + static_cast<int>(k);
  }
  const int nparams = 1 + r + static_cast<int>(nsites) * r + static_cast<int>(offset_sites.size());
  // The parameter that holds site `s`'s stride along dim `k` of the collapsed domain.
  auto stride_param = [&](size_t s, int k) { return 1 + r + static_cast<int>(s) * r + k; };
  // Domain dims the code reads the index of (cats select by them, guarded loads test them),
  // and where each is in the collapsed domain.
  std::map<int, int> observed_pos;
  {
    if (layout.observed_pos.size() != indexing.observed.size()) {
      return absl::InternalError("elementwise emitter: layout does not match the observed dims");
    }
    int j = 0;
    for (const auto& [dim, bounds] : indexing.observed) observed_pos[dim] = layout.observed_pos[j++];
  }
  auto guarded_site = [&](size_t s) { return !indexing.sites[s].map.guards.empty(); };
  bool guarded = false;
  for (size_t s = 0; s < nsites; ++s) guarded |= guarded_site(s);
  // `load` as site `s` reads it: where the site is guarded, `type`'s zero outside its part of
  // the domain (the `ok<s>` flag of emit_offsets).
  auto guarded_load = [&](size_t s, const std::string& load, const std::string& type) {
    return guarded_site(s) ? absl::StrCat("ok", s, " ? ", load, " : ", type, "{}") : load;
  };
  // The test of site `s`'s guards for the element `lane` elements past the chunk's first
  // ("" for that element itself).
  auto guard_cond = [&](size_t s, const std::string& lane) {
    std::string cond;
    for (const Guard& g : indexing.sites[s].map.guards) {
      const int pos = observed_pos.at(g.dim);
      const std::string d = lane.empty() || pos != r - 1 ? absl::StrCat("d", pos)
                                                         : absl::StrCat("(d", pos, " + ", lane, ")");
      absl::StrAppend(&cond, cond.empty() ? "" : " && ", "(", d, " >= ", g.lo, " && ", d, " < ",
                      g.hi, ")");
    }
    return cond;
  };
  CudaWriter w;
  auto site_type = [&](size_t s) {
    return StorageTypeName(body.input(indexing.sites[s].input)->type().dtype);
  };
  auto out_type = [&](int o) { return StorageTypeName(body.outputs()[o]->type().dtype); };
  // Sites that read one element for a whole row of vectors (broadcast along the innermost dim).
  auto splat = [&](size_t s) {
    return layout.access[s] == Access::kScalar || layout.access[s] == Access::kInnerBroadcast;
  };
  // Site `s`'s element at its offset; its `width` elements there as one vector; its element
  // `e` lanes past the offset along the innermost dim.
  auto scalar_load = [&](size_t s) {
    return absl::StrCat("in", indexing.sites[s].input, "[off", s, "]");
  };
  auto vector_load = [&](size_t s, int width) {
    return absl::StrCat("*reinterpret_cast<const TfVec<", site_type(s), ", ", width, ">*>(in",
                        indexing.sites[s].input, " + off", s, ")");
  };
  auto lane_load = [&](size_t s) {
    return absl::StrCat("in", indexing.sites[s].input, "[off", s, " + e * p.v[",
                        stride_param(s, r - 1), "]]");
  };
  // Output `o`'s vector r<o> of `width` elements: declared, and stored at flat index i.
  auto declare_result = [&](int o, int width) {
    w.Line("TfVec<", out_type(o), ", ", width, "> r", o, ";");
  };
  auto store_result = [&](int o, int width) {
    w.Line("*reinterpret_cast<TfVec<", out_type(o), ", ", width, ">*>(out", o, " + i) = r", o, ";");
  };
  w.Line("// torchfuse elementwise kernel: ", base_name, ", layout ", layout.Signature());
  w.Line("struct TfParams { ", I, " v[", nparams, "]; };");
  w.Blank();

  // Per-element function.
  std::string elem_args;
  for (size_t s = 0; s < nsites; ++s) {
    absl::StrAppend(&elem_args, s ? ", " : "", site_type(s), " s", s);
  }
  for (int o = 0; o < nout; ++o) {
    absl::StrAppend(&elem_args, (nsites || o) ? ", " : "", out_type(o), "& o", o);
  }
  for (const auto& [dim, pos] : observed_pos) absl::StrAppend(&elem_args, ", ", I, " ix", dim);
  {
    CudaWriter::Scope fn(&w, absl::StrCat("__device__ __forceinline__ void tf_elem(", elem_args, ")"));
    ExprEmitter emitter(&w, KernelFastMath(body, /*row=*/false),
                        [&](const Value* v, const IndexMap& map) -> std::optional<std::string> {
                          if (v->producer() != nullptr) return std::nullopt;
                          const int site = indexing.site_index.at({v->index(), map});
                          const DType have = graph::ComputeDType(v->type().dtype);
                          return absl::StrCat("tf_cvt<", StorageTypeName(have), ">(s", site, ")");
                        });
    emitter.SetDomain(indexing.domain, [](int dim) { return absl::StrCat("ix", dim); });
    const IndexMap identity = IndexMap::Identity(indexing.domain.size());
    for (int o = 0; o < nout; ++o) {
      const Value* v = body.outputs()[o];
      TF_ASSIGN_OR_RETURN(std::string name, emitter.Emit(v, identity));
      w.Line("o", o, " = tf_cvt<", StorageTypeName(v->type().dtype), ">(", name, ");");
    }
  }
  w.Blank();

  // The kernel.
  std::string params;
  for (int i = 0; i < nin; ++i) {
    absl::StrAppend(&params, "const ", StorageTypeName(body.input(i)->type().dtype),
                    "* __restrict__ in", i, ", ");
  }
  for (int o = 0; o < nout; ++o) {
    absl::StrAppend(&params, StorageTypeName(body.outputs()[o]->type().dtype), "* __restrict__ out",
                    o, ", ");
  }
  absl::StrAppend(&params, "const TfParams p");
  const std::string name_placeholder = "TF_KERNEL_NAME";
  {
    CudaWriter::Scope kernel(&w, absl::StrCat("extern \"C\" __global__ void __launch_bounds__(",
                                              block_size, ") ", name_placeholder, "(", params, ")"));
    w.Line("const ", I, " numel = p.v[0];");
    w.Line("const ", I, " step = (", I, ")gridDim.x * blockDim.x;");
    w.Line("const ", I, " first = (", I, ")blockIdx.x * blockDim.x + threadIdx.x;");
    // Offsets of the sites `which` takes, for the element at flat index `i` whose collapsed
    // coordinates are d0..d<r-1>.
    auto emit_site_offsets = [&](const std::string& i, const std::function<bool(size_t)>& which) {
      for (size_t s = 0; s < nsites; ++s) {
        if (!which(s)) continue;
        auto it = offset_param.find(static_cast<int>(s));
        const std::string base =
            it == offset_param.end() ? "" : absl::StrCat(" + p.v[", it->second, "]");
        switch (layout.access[s]) {
          case Access::kLinear: w.Line("const ", I, " off", s, " = ", i, base, ";"); break;
          case Access::kScalar: w.Line("const ", I, " off", s, " = 0", base, ";"); break;
          default: {
            // The innermost stride is known here: 1 (contiguous) or 0 (broadcast).
            std::string sum;
            for (int k = 0; k < r; ++k) {
              std::string term = absl::StrCat("d", k, " * p.v[", stride_param(s, k), "]");
              if (k == r - 1 && layout.access[s] == Access::kInnerContiguous) term = absl::StrCat("d", k);
              if (k == r - 1 && layout.access[s] == Access::kInnerBroadcast) continue;
              absl::StrAppend(&sum, sum.empty() ? "" : " + ", term);
            }
            w.Line("const ", I, " off", s, " = ", sum.empty() ? "0" : sum, base, ";");
          }
        }
        // A guarded site reads only inside its cat operand's part of the domain.
        if (guarded_site(s)) w.Line("const bool ok", s, " = ", guard_cond(s, ""), ";");
      }
    };
    // Offsets of every site for the element at flat index `i` (start of a chunk).
    auto emit_offsets = [&](const std::string& i) {
      bool need_index = guarded || !observed_pos.empty();
      for (Access a : layout.access) need_index |= a != Access::kLinear && a != Access::kScalar;
      if (need_index && r > 1) {
        w.Line(I, " rem = ", i, ";");
        for (int k = r - 1; k >= 1; --k) {
          w.Line("const ", I, " d", k, " = rem % p.v[", 1 + k, "];");
          w.Line("rem /= p.v[", 1 + k, "];");
        }
        w.Line("const ", I, " d0 = rem;");
      } else if (need_index) {
        w.Line("const ", I, " d0 = ", i, ";");
      }
      emit_site_offsets(i, [](size_t) { return true; });
    };
    auto call_elem = [&](const std::string& e, bool vector) {
      std::string args;
      for (size_t s = 0; s < nsites; ++s) {
        absl::StrAppend(&args, s ? ", " : "",
                        vector ? (splat(s) ? absl::StrCat("x", s, "[u]") : absl::StrCat("l", s, "[u].v[", e, "]"))
                               : absl::StrCat("x", s));
      }
      for (int o = 0; o < nout; ++o) {
        absl::StrAppend(&args, (nsites || o) ? ", " : "",
                        vector ? absl::StrCat("r", o, ".v[", e, "]") : absl::StrCat("out", o, "[", e, "]"));
      }
      for (const auto& [dim, pos] : observed_pos) {
        if (!vector) absl::StrAppend(&args, ", d", pos);
        else if (pos == r - 1) absl::StrAppend(&args, ", ix", dim, "[u] + e");
        else absl::StrAppend(&args, ", ix", dim, "[u]");
      }
      w.Line("tf_elem(", args, ");");
    };
    if (layout.tile_dim >= 0) {
      // Tiles of 32 x 32 elements of (tile_dim, innermost), the other dims fixed per tile. A
      // kTile site is read with the lanes along tile_dim, where it is contiguous, into shared
      // memory (one spare column: the transposed reads hit distinct banks); the outputs are
      // computed and written with the lanes along the innermost dim. With tile_vec V > 1,
      // each lane reads V consecutive elements of a tile row as one vector and writes V
      // consecutive outputs as one: 32 / V lanes per row, V rows per warp.
      const int t = layout.tile_dim;
      const int tv = layout.tile_vec;
      const int lanes = 32 / std::max(tv, 1);
      // Any block of whole warps walks the tile's rows (threads past its 32nd row idle).
      if (t >= r - 1 || tv < 1 || 32 % tv != 0 || block_size % lanes != 0 ||
          (tv > 1 && (guarded || !observed_pos.empty()))) {
        return absl::InternalError("elementwise emitter: bad tiled layout or block size");
      }
      const int rows_per_step = block_size / lanes;
      auto tiled = [&](size_t s) { return layout.access[s] == Access::kTile; };
      w.Line("const ", I, " nt = p.v[", 1 + t, "], nj = p.v[", r, "];");
      w.Line("const ", I, " tiles_t = (nt + 31) / 32, tiles_j = (nj + 31) / 32;");
      w.Line("const ", I, " ntiles = numel / (nt * nj) * tiles_t * tiles_j;");
      for (size_t s = 0; s < nsites; ++s) {
        if (tiled(s)) w.Line("__shared__ ", site_type(s), " tile", s, "[32][33];");
      }
      w.Line("const int tx = threadIdx.x % ", lanes, ", ty = threadIdx.x / ", lanes, ";");
      CudaWriter::Scope loop(&w, absl::StrCat("for (", I, " tile = blockIdx.x; tile < ntiles; tile += gridDim.x)"));
      w.Line(I, " rem = tile;");
      w.Line("const ", I, " tj = rem % tiles_j;");
      w.Line("rem /= tiles_j;");
      w.Line("const ", I, " tt = rem % tiles_t;");
      w.Line("rem /= tiles_t;");
      std::vector<int> outer;
      for (int k = 0; k < r - 1; ++k) {
        if (k != t) outer.push_back(k);
      }
      for (int j = static_cast<int>(outer.size()) - 1; j >= 0; --j) {
        const int k = outer[j];
        if (j == 0) {
          w.Line("const ", I, " d", k, " = rem;");
        } else {
          w.Line("const ", I, " d", k, " = rem % p.v[", 1 + k, "];");
          w.Line("rem /= p.v[", 1 + k, "];");
        }
      }
      // The tile's element (tt * 32 + a, tj * 32 + b) in coordinates d<t>, d<r-1>.
      auto tile_coords = [&](const std::string& a, const std::string& b) {
        w.Line("const ", I, " d", t, " = tt * 32 + ", a, ";");
        w.Line("const ", I, " d", r - 1, " = tj * 32 + ", b, ";");
      };
      const std::string in_tile = absl::StrCat("d", t, " < nt && d", r - 1, " < nj");
      const std::string lane0 = tv > 1 ? absl::StrCat("tx * ", tv) : "tx";
      const std::string step_loop =
          absl::StrCat("for (int y = ty; y < 32; y += ", rows_per_step, ")");
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope load(&w, step_loop);
        tile_coords(lane0, "y");
        CudaWriter::Scope inside(&w, absl::StrCat("if (", in_tile, ")"));
        emit_site_offsets("", tiled);
        for (size_t s = 0; s < nsites; ++s) {
          if (!tiled(s)) continue;
          if (tv == 1) {
            w.Line("tile", s, "[y][tx] = ", guarded_load(s, scalar_load(s), site_type(s)), ";");
            continue;
          }
          w.Line("const TfVec<", site_type(s), ", ", tv, "> v", s, " = ", vector_load(s, tv), ";");
          w.Line("#pragma unroll");
          w.Line("for (int e = 0; e < ", tv, "; ++e) tile", s, "[y][", lane0, " + e] = v", s, ".v[e];");
        }
      }
      w.Line("__syncthreads();");
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope compute(&w, step_loop);
        tile_coords("y", lane0);
        CudaWriter::Scope inside(&w, absl::StrCat("if (", in_tile, ")"));
        std::string flat = "d0";
        for (int k = 1; k < r; ++k) {
          flat = absl::StrCat(k > 1 ? absl::StrCat("(", flat, ")") : flat, " * p.v[", 1 + k, "] + d", k);
        }
        w.Line("const ", I, " i = ", flat, ";");
        emit_site_offsets("i", [&](size_t s) { return !tiled(s); });
        if (tv == 1) {
          for (size_t s = 0; s < nsites; ++s) {
            w.Line("const ", site_type(s), " x", s, " = ",
                   tiled(s) ? absl::StrCat("tile", s, "[tx][y]")
                            : guarded_load(s, scalar_load(s), site_type(s)),
                   ";");
          }
          call_elem("i", false);
        } else {
          for (size_t s = 0; s < nsites; ++s) {
            if (tiled(s)) continue;
            if (splat(s)) {
              w.Line("const ", site_type(s), " x", s, " = ", scalar_load(s), ";");
              continue;
            }
            const std::string vt = absl::StrCat("TfVec<", site_type(s), ", ", tv, ">");
            if (layout.access[s] == Access::kLanes) {
              w.Line(vt, " l", s, ";");
              w.Line("#pragma unroll");
              w.Line("for (int e = 0; e < ", tv, "; ++e) l", s, ".v[e] = ", lane_load(s), ";");
            } else {
              w.Line("const ", vt, " l", s, " = ", vector_load(s, tv), ";");
            }
          }
          for (int o = 0; o < nout; ++o) declare_result(o, tv);
          std::string args;
          for (size_t s = 0; s < nsites; ++s) {
            absl::StrAppend(&args, s ? ", " : "",
                            tiled(s) ? absl::StrCat("tile", s, "[", lane0, " + e][y]")
                            : splat(s) ? absl::StrCat("x", s)
                                       : absl::StrCat("l", s, ".v[e]"));
          }
          for (int o = 0; o < nout; ++o) {
            absl::StrAppend(&args, (nsites || o) ? ", " : "", "r", o, ".v[e]");
          }
          w.Line("#pragma unroll");
          w.Line("for (int e = 0; e < ", tv, "; ++e) tf_elem(", args, ");");
          for (int o = 0; o < nout; ++o) store_result(o, tv);
        }
      }
      w.Line("__syncthreads();");
    } else if (vec > 1) {
      // Each thread loads `unroll` chunks (blockDim apart, so warps stay coalesced) before
      // computing any, to keep more bytes in flight.
      const int u = std::max(1, layout.unroll);
      w.Line("const ", I, " chunks = numel / ", vec, ";");
      CudaWriter::Scope loop(&w, absl::StrCat("for (", I, " base = (", I, ")blockIdx.x * blockDim.x * ",
                                              u, " + threadIdx.x; base < chunks; base += step * ", u,
                                              ")"));
      for (size_t s = 0; s < nsites; ++s) {
        if (splat(s)) {
          w.Line(site_type(s), " x", s, "[", u, "];");
        } else {
          w.Line("TfVec<", site_type(s), ", ", vec, "> l", s, "[", u, "];");
        }
      }
      for (const auto& [dim, pos] : observed_pos) w.Line(I, " ix", dim, "[", u, "];");
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope loads(&w, absl::StrCat("for (int u = 0; u < ", u, "; ++u)"));
        w.Line("const ", I, " c = base + (", I, ")u * blockDim.x;");
        w.Line("if (c >= chunks) break;");
        w.Line("const ", I, " i = c * ", vec, ";");
        emit_offsets("i");
        for (const auto& [dim, pos] : observed_pos) w.Line("ix", dim, "[u] = d", pos, ";");
        for (size_t s = 0; s < nsites; ++s) {
          const char* t = site_type(s);
          if (splat(s)) {
            w.Line("x", s, "[u] = ", guarded_load(s, scalar_load(s), t), ";");
          } else if (layout.access[s] == Access::kLanes) {
            // Element by element, each tested against the site's guards by itself.
            const std::string load = lane_load(s);
            w.Line("#pragma unroll");
            CudaWriter::Scope lanes(&w, absl::StrCat("for (int e = 0; e < ", vec, "; ++e)"));
            w.Line("l", s, "[u].v[e] = ",
                   guarded_site(s) ? absl::StrCat("(", guard_cond(s, "e"), ") ? ", load, " : ", t, "{}")
                                   : load,
                   ";");
          } else {
            w.Line("l", s, "[u] = ",
                   guarded_load(s, vector_load(s, vec), absl::StrCat("TfVec<", t, ", ", vec, ">")),
                   ";");
          }
        }
      }
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope stores(&w, absl::StrCat("for (int u = 0; u < ", u, "; ++u)"));
        w.Line("const ", I, " c = base + (", I, ")u * blockDim.x;");
        w.Line("if (c >= chunks) break;");
        w.Line("const ", I, " i = c * ", vec, ";");
        for (int o = 0; o < nout; ++o) declare_result(o, vec);
        w.Line("#pragma unroll");
        {
          CudaWriter::Scope inner(&w, absl::StrCat("for (int e = 0; e < ", vec, "; ++e)"));
          call_elem("e", true);
        }
        for (int o = 0; o < nout; ++o) store_result(o, vec);
      }
    }
    // Scalar loop: everything when vec == 1 (untiled), else the tail of a flat domain.
    if (layout.tile_dim < 0) {
      const std::string start = vec > 1 ? absl::StrCat("(numel / ", vec, ") * ", vec, " + first")
                                        : std::string("first");
      CudaWriter::Scope loop(&w, absl::StrCat("for (", I, " i = ", start, "; i < numel; i += step)"));
      emit_offsets("i");
      for (size_t s = 0; s < nsites; ++s) {
        w.Line("const ", site_type(s), " x", s, " = ", guarded_load(s, scalar_load(s), site_type(s)),
               ";");
      }
      call_elem("i", false);
    }
  }
  // Name: base, dtype of the first output, layout, and a hash of the source.
  std::string body_text = w.str();
  const std::string dtype = graph::DTypeName(body.outputs()[0]->type().dtype);
  const uint64_t h = Fnv1a(body_text);
  KernelSource out;
  out.name = absl::StrFormat("tf_%s_%s_v%d_%08x", base_name, dtype, vec,
                             static_cast<uint32_t>(h ^ (h >> 32)));
  out.source = absl::StrCat(DevicePrelude(), "\n",
                            absl::StrReplaceAll(body_text, {{name_placeholder, out.name}}));
  out.block_size = block_size;
  out.hash = Fnv1a(out.source);
  return out;
}

std::string ElementwiseVariant::Signature() const {
  return absl::StrCat("b", block_size, "_u", unroll);
}

absl::StatusOr<ElementwiseVariant> ParseElementwiseVariant(const std::string& signature) {
  ElementwiseVariant v;
  std::vector<std::string> parts = absl::StrSplit(signature, '_');
  if (parts.size() != 2 || parts[0].size() < 2 || parts[0][0] != 'b' || parts[1].size() < 2 ||
      parts[1][0] != 'u' || !absl::SimpleAtoi(parts[0].substr(1), &v.block_size) ||
      !absl::SimpleAtoi(parts[1].substr(1), &v.unroll) || v.block_size < 32 ||
      v.block_size > 1024 || v.block_size % 32 != 0 || v.unroll < 1 || v.unroll > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad elementwise variant '", signature, "' (expected e.g. b128_u2)"));
  }
  return v;
}

std::vector<ElementwiseVariant> ElementwiseVariantSpace(const KernelLayout& layout,
                                                        const ElementwiseVariant& heuristic) {
  std::vector<ElementwiseVariant> space = {heuristic};
  for (int block : {128, 256, 512}) {
    // A tiled kernel's block is worth trying where its threads cover a divisor of the tile's
    // 32 rows (more would idle).
    const int tile_rows = block * layout.tile_vec / 32;
    if (layout.tile_dim >= 0 && (tile_rows > 32 || 32 % tile_rows != 0)) continue;
    for (int unroll : {1, 2, 4}) {
      if (layout.vec == 1 && unroll > 1) continue;
      const ElementwiseVariant v{block, unroll};
      if (std::find(space.begin(), space.end(), v) == space.end()) space.push_back(v);
    }
  }
  return space;
}

int64_t ElementwiseGridSize(const KernelLayout& layout, int64_t numel,
                            const ElementwiseVariant& variant) {
  if (layout.tile_dim >= 0) {
    // Tiles of up to 32 x 32 elements; the kernel's loop over tiles takes any grid.
    return std::clamp<int64_t>((numel + 1023) / 1024, 1, (1LL << 31) - 1);
  }
  const int64_t work = layout.vec > 1 ? std::max<int64_t>(numel / layout.vec, 1) : numel;
  const int64_t per_block =
      static_cast<int64_t>(variant.block_size) * (layout.vec > 1 ? variant.unroll : 1);
  return std::clamp<int64_t>((work + per_block - 1) / per_block, 1, (1LL << 31) - 1);
}

}  // namespace torchfuse::codegen
