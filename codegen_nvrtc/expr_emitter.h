// Writes the CUDA statements that compute values of a fusion group's body at one element.
#ifndef TORCHFUSE_CODEGEN_NVRTC_EXPR_EMITTER_H_
#define TORCHFUSE_CODEGEN_NVRTC_EXPR_EMITTER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/cuda_writer.h"
#include "codegen_nvrtc/indexing.h"
#include "graph/graph.h"

namespace torchfuse::codegen {

/// The C type that stores `dtype` in memory (tf_bf16 for bf16).
const char* StorageTypeName(graph::DType dtype);
/// The C type that computes with `dtype` (float for bf16).
const char* ComputeTypeName(graph::DType dtype);
/// A literal of `compute` type for `v` (inf and NaN through prelude helpers).
std::string Literal(double v, graph::DType compute);

/// Which f32 ops of a kernel take the prelude's hardware approximations instead of the exact
/// forms (expf, IEEE division, tanhf). Never inside a comparison's cone, never in f64.
enum class FastMath {
  kExact,
  /// exp (`ex2.approx` of x * log2(e): a relative error of about 2^-22 plus 2^-24 * |x|) and
  /// division (a product with the approximate reciprocal of the divisor: about 2 ulps), the
  /// forms Inductor's Triton kernels compute in f32. They keep subnormals, infinities and NaN.
  kExpDiv,
  /// kExpDiv and tanh (`tanh.approx`, about 2^-11): only where every output is f16/bf16,
  /// whose rounding is coarser still.
  kHalf,
};

/// Emits, on demand, one `const T vN = expr;` line per (value, index map) of a body,
/// reusing earlier lines (memoized until Clear). Values are computed in their compute type
/// (f32 for f16/bf16).
class ExprEmitter {
 public:
  /// Called first for every (value, map): a name or expression giving the value in its
  /// compute type (an expression is bound to a fresh name once), or nullopt to compute it
  /// here. Must answer for body inputs.
  using LeafFn = std::function<std::optional<std::string>(const graph::Value*, const IndexMap&)>;
  /// Called after a value was computed into `name`.
  using ComputedFn =
      std::function<void(const graph::Value*, const IndexMap&, const std::string& name)>;

  /// `fast_math`: which f32 ops may use the hardware approximations (FastMath).
  ExprEmitter(CudaWriter* w, FastMath fast_math, LeafFn leaf, ComputedFn computed = nullptr);

  /// A name holding `v` (read with `map`) converted to `compute`.
  absl::StatusOr<std::string> Get(const graph::Value* v, const IndexMap& map, graph::DType compute);
  /// A name holding `v` (read with `map`) in its own compute type.
  absl::StatusOr<std::string> Emit(const graph::Value* v, const IndexMap& map);
  /// Forgets emitted names (a new C++ scope begins).
  void Clear() {
    names_.clear();
    rounded_names_.clear();
  }
  /// The iteration domain, and how the code names the index along one of its dims (needed
  /// for cats that select by it).
  void SetDomain(std::vector<int64_t> domain, std::function<std::string(int)> index) {
    domain_ = std::move(domain);
    index_ = std::move(index);
  }

 private:
  absl::StatusOr<std::string> NodeExpr(const graph::Node& n, const IndexMap& map, graph::DType out);

  CudaWriter* w_;
  FastMath fast_math_;
  LeafFn leaf_;
  ComputedFn computed_;
  std::vector<int64_t> domain_;
  std::function<std::string(int)> index_;
  std::map<std::pair<const graph::Value*, IndexMap>, std::string> names_;
  // While emitting a comparison's operands: every f16/bf16 value of their cone is rounded to
  // its type, as eager stores it (see NodeExpr); those names are kept apart.
  bool rounding_ = false;
  std::map<std::pair<const graph::Value*, IndexMap>, std::string> rounded_names_;
};

/// True when every output of `body` is f16 or bf16.
bool HalfOutputs(const graph::Graph& body);

/// The f32 math a kernel of `body` may approximate: kHalf where every output is f16/bf16;
/// else kExpDiv for a row kernel (`row`), kExact for the others.
FastMath KernelFastMath(const graph::Graph& body, bool row);

/// FNV-1a of `s`, for kernel names and cache lookups.
uint64_t Fnv1a(const std::string& s);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_EXPR_EMITTER_H_
