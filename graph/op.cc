#include "graph/op.h"

namespace torchfuse::graph {
namespace {

struct OpInfo {
  const char* name;
  OpCategory category;
  int arity;
  const char* cuda;
  const char* reference;
};

constexpr OpInfo kOps[] = {
#define TF_OP(e, name, cat, arity, cuda, ref) {name, OpCategory::cat, arity, cuda, ref},
#include "graph/ops.def"
#undef TF_OP
};

const OpInfo& Info(OpKind kind) { return kOps[static_cast<int>(kind)]; }

}  // namespace

int NumOpKinds() { return static_cast<int>(sizeof(kOps) / sizeof(kOps[0])); }
const char* OpName(OpKind kind) { return Info(kind).name; }
OpCategory OpCategoryOf(OpKind kind) { return Info(kind).category; }
int OpArity(OpKind kind) { return Info(kind).arity; }
const char* OpCudaExpr(OpKind kind) { return Info(kind).cuda; }
const char* OpReference(OpKind kind) { return Info(kind).reference; }

std::optional<OpKind> OpKindFromName(absl::string_view name) {
  for (int i = 0; i < NumOpKinds(); ++i) {
    if (name == kOps[i].name) return static_cast<OpKind>(i);
  }
  return std::nullopt;
}

bool IsOnePassReduction(OpKind kind) {
  return kind == OpKind::kSum || kind == OpKind::kMean || kind == OpKind::kAmax ||
         kind == OpKind::kAmin;
}

bool IsElementwise(OpKind kind) {
  switch (OpCategoryOf(kind)) {
    case OpCategory::kUnary:
    case OpCategory::kBinary:
    case OpCategory::kCompare:
    case OpCategory::kTernary:
      return true;
    case OpCategory::kSource:
    case OpCategory::kReduction:
    case OpCategory::kNormalization:
    case OpCategory::kMatmul:
    case OpCategory::kLayout:
    case OpCategory::kOpaque:
    case OpCategory::kFusionGroup:
      return false;
  }
  return false;
}

bool IsFloatOnlyUnary(OpKind kind) {
  switch (kind) {
    case OpKind::kExp: case OpKind::kLog: case OpKind::kLog1p: case OpKind::kTanh:
    case OpKind::kSigmoid: case OpKind::kGelu: case OpKind::kGeluTanh: case OpKind::kSilu:
    case OpKind::kSqrt: case OpKind::kRsqrt: case OpKind::kReciprocal: case OpKind::kErf:
    case OpKind::kSin: case OpKind::kCos:
      return true;
    default:
      return false;
  }
}

}  // namespace torchfuse::graph
