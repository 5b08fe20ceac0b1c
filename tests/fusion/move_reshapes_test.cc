#include "fusion/move_reshapes.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "fusion/pipeline.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "../support/graph_pass_test.h"

namespace torchfuse::fusion {
namespace {

using graph::OpKind;

class MoveReshapesTest : public test_support::GraphPassTest {
 protected:
  MoveReshapesTest() : GraphPassTest(&MoveReshapes) {}

  // The last node of `kind` in graph_ (with `rank` dims where rank >= 0), or null.
  const graph::Node* Last(OpKind kind, int rank = -1) const {
    const graph::Node* found = nullptr;
    for (const auto& n : graph_->nodes()) {
      if (n->kind() == kind &&
          (rank < 0 || static_cast<int>(n->output()->type().sizes.size()) == rank)) {
        found = n.get();
      }
    }
    return found;
  }

  // `text` through the whole fusion pipeline; null where it does not parse or fuse.
  static std::unique_ptr<graph::Graph> Fused(const std::string& text) {
    auto g = graph::ParseGraph(text);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return nullptr;
    absl::Status fused = RunFusionPipeline(g->get());
    EXPECT_TRUE(fused.ok()) << fused;
    return fused.ok() ? *std::move(g) : nullptr;
  }

  // Whether fusion group `group` normalizes rows (a layer norm, or its mean or sum).
  static bool ReducesRows(const graph::Node& group) {
    for (const auto& b : group.body()->nodes()) {
      if (b->kind() == OpKind::kLayerNorm || b->kind() == OpKind::kMean ||
          b->kind() == OpKind::kSum) {
        return true;
      }
    }
    return false;
  }
};

int Groups(const graph::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->kind() == OpKind::kFusionGroup;
  return n;
}

// The cross-entropy of a language model: logits cast to f32, viewed as rows, log_softmax.
constexpr char kLossHead[] = R"(graph(%x: bf16[8,16,50]) {
    %f: f32[8,16,50] = cast(%x) {dtype="f32"}
    %v: f32[128,50] = reshape(%f) {shape=[128,50]}
    %y: f32[128,50] = log_softmax(%v) {dim=-1}
    return(%y)
  })";

TEST_F(MoveReshapesTest, ACastBeforeAViewMovesAfterItAndJoinsTheRowKernel) {
  ASSERT_TRUE(Run(kLossHead));
  // The reshape now reads the graph input; the cast reads the reshape.
  const graph::Node* first = graph_->nodes().front().get();
  EXPECT_EQ(first->kind(), OpKind::kReshape) << graph::PrintGraph(*graph_);
  EXPECT_EQ(first->output()->type().dtype, graph::DType::kBF16);
  auto full = Fused(kLossHead);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
}

TEST_F(MoveReshapesTest, ACastAfterAViewOfAKernelsResultMovesBeforeIt) {
  // A row kernel's f32 result, viewed back to [8, 16, 50], cast to bf16 for a matmul.
  auto g = Fused(R"(graph(%x: f32[128,50], %w: bf16[50,4]) {
      %y: f32[128,50] = softmax(%x) {dim=-1}
      %v: f32[8,16,50] = reshape(%y) {shape=[8,16,50]}
      %h: bf16[8,16,50] = cast(%v) {dtype="bf16"}
      %m: bf16[8,16,4] = matmul(%h, %w)
      return(%m)
    })");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Groups(*g), 1) << graph::PrintGraph(*g);
  for (const auto& n : g->nodes()) {
    if (n->kind() == OpKind::kFusionGroup) {
      EXPECT_EQ(n->output()->type().dtype, graph::DType::kBF16) << graph::PrintGraph(*g);
    }
  }
}

constexpr char kCastUsedTwice[] = R"(graph(%x: bf16[8,16,50]) {
    %f: f32[8,16,50] = cast(%x) {dtype="f32"}
    %v: f32[128,50] = reshape(%f) {shape=[128,50]}
    %y: f32[128,50] = log_softmax(%v) {dim=-1}
    return(%y, %f)
  })";

TEST_F(MoveReshapesTest, ValuesUsedTwiceAndGraphOutputsStay) {
  ASSERT_TRUE(Run(kCastUsedTwice));
  // The cast, used twice, is computed once where it was: the view moves past the row op
  // instead (the rows are the same), so one kernel writes both outputs.
  EXPECT_EQ(Count(OpKind::kCast), 1) << graph::PrintGraph(*graph_);
  const graph::Node* f = graph_->outputs()[1]->producer();
  ASSERT_EQ(f->kind(), OpKind::kCast) << graph::PrintGraph(*graph_);
  EXPECT_EQ(f->input(0), graph_->inputs()[0].get());
  EXPECT_EQ(graph_->outputs()[0]->producer()->kind(), OpKind::kReshape)
      << graph::PrintGraph(*graph_);
  auto full = Fused(kCastUsedTwice);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
  // A reshape that only drops a size-1 dim is an index map already: left alone.
  EXPECT_FALSE(Run(R"(graph(%x: bf16[8,1,50]) {
      %f: f32[8,1,50] = cast(%x) {dtype="f32"}
      %v: f32[8,50] = reshape(%f) {shape=[8,50]}
      return(%v)
    })"));
}

// `v.unsqueeze(0).squeeze(0)` between a prologue and its layer norm used to split the chain
// into two kernels, the first rounding its bf16 result where neither eager nor the exact
// answer rounds (comparisons after it fell the other way). Chains of reshapes that end in
// the sizes they started from are their source.
TEST_F(MoveReshapesTest, ReshapeChainsThatEndWhereTheyStartedAreTheirSource) {
  constexpr char kText[] = R"(graph(%x: bf16[33,1000]) {
      %a: bf16[33,1000] = abs(%x)
      %u: bf16[1,33,1000] = unsqueeze(%a) {dim=0}
      %r: bf16[33000] = reshape(%u) {shape=[33000]}
      %b: bf16[33,1000] = reshape(%r) {shape=[33,1000]}
      %s: bf16[1,33,1000] = unsqueeze(%b) {dim=0}
      %q: bf16[33,1000] = squeeze(%s) {dims=[0]}
      %y: bf16[33,1000] = layer_norm(%q) {normalized_ndim=1, eps=1e-05}
      return(%y, %s)
    })";
  ASSERT_TRUE(Run(kText));
  // The layer norm reads abs directly; %s (a graph output) is the unsqueeze of abs.
  const graph::Node* norm = Last(OpKind::kLayerNorm);
  ASSERT_NE(norm, nullptr);
  ASSERT_NE(norm->input(0)->producer(), nullptr);
  EXPECT_EQ(norm->input(0)->producer()->kind(), OpKind::kAbs) << graph::PrintGraph(*graph_);
  const graph::Node* s = graph_->outputs()[1]->producer();
  EXPECT_EQ(s->kind(), OpKind::kUnsqueeze) << graph::PrintGraph(*graph_);
  EXPECT_EQ(s->input(0)->producer()->kind(), OpKind::kAbs);
  auto full = Fused(kText);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
}

// Shifted-window attention (Swin): the scores get a bias per head, are viewed with the batch
// split into [batches, windows], get a mask per window, and are viewed back for the softmax.
// Both views leave the kernel: the first moves onto the product's result (a view there), the
// second past the softmax, so the two adds and the softmax are one kernel. (ATen's matmul
// expands the probabilities to their own sizes before the second product.)
constexpr char kWindowScores[] = R"(graph(%q: f32[24,3,49,32], %k: f32[24,3,32,49],
                                          %bias: f32[1,3,49,49], %mask: f32[1,4,1,49,49]) {
    %p: f32[24,3,49,49] = matmul(%q, %k)
    %a: f32[24,3,49,49] = add(%p, %bias)
    %w: f32[6,4,3,49,49] = reshape(%a) {shape=[6,4,3,49,49]}
    %b: f32[6,4,3,49,49] = add(%w, %mask)
    %r: f32[24,3,49,49] = reshape(%b) {shape=[24,3,49,49]}
    %y: f32[24,3,49,49] = softmax(%r) {dim=3}
    %e: f32[24,3,49,49] = expand(%y) {shape=[24,3,49,49]}
    %f: f32[72,49,49] = reshape(%e) {shape=[72,49,49]}
    return(%f)
  })";

TEST_F(MoveReshapesTest, WindowMaskViewsLeaveTheScoresKernel) {
  ASSERT_TRUE(Run(kWindowScores));
  // The softmax now reads the second add, over [6,4,3,49,49]; the first add reads a view of
  // the product and the bias with a window dim of one.
  const graph::Node* softmax = Last(OpKind::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->output()->type().sizes, (std::vector<int64_t>{6, 4, 3, 49, 49}))
      << graph::PrintGraph(*graph_);
  const graph::Node* b = softmax->input(0)->producer();
  ASSERT_EQ(b->kind(), OpKind::kAdd) << graph::PrintGraph(*graph_);
  const graph::Node* a = b->input(0)->producer();
  ASSERT_EQ(a->kind(), OpKind::kAdd) << graph::PrintGraph(*graph_);
  EXPECT_EQ(a->input(0)->producer()->kind(), OpKind::kReshape);
  EXPECT_EQ(a->input(0)->producer()->input(0)->producer()->kind(), OpKind::kMatmul);
  EXPECT_EQ(a->input(1)->type().sizes, (std::vector<int64_t>{1, 1, 3, 49, 49}));
  auto full = Fused(kWindowScores);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(Groups(*full), 1) << graph::PrintGraph(*full);
}

TEST_F(MoveReshapesTest, AScalarOperandStaysAScalarWhenTheViewMovesBeforeItsOp) {
  // mean over the last two dims of x - 0.25: the view to rows moves before the sub, and the
  // wrapped 0.25 stays 0-dim (a [1, 1] copy of it would promote the sub to f64 in ATen).
  ASSERT_TRUE(Run(R"(graph(%x: f32[3,33,2]) {
      %c: f64[] = constant() {dtype="f64", value=0.25, wrapped=1}
      %d: f32[3,33,2] = sub(%x, %c)
      %r: f32[3,66] = reshape(%d) {shape=[3,66]}
      %y: f32[3,1] = mean(%r) {dims=[1], keepdim=1}
      return(%y)
    })"));
  for (const auto& n : graph_->nodes()) {
    EXPECT_FALSE(n->kind() == OpKind::kReshape && n->output()->type().dtype == graph::DType::kF64)
        << graph::PrintGraph(*graph_);
  }
  const graph::Node* sub = Last(OpKind::kSub);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->output()->type().sizes, (std::vector<int64_t>{3, 66}))
      << graph::PrintGraph(*graph_);
  EXPECT_TRUE(sub->input(1)->type().sizes.empty()) << graph::PrintGraph(*graph_);
  EXPECT_EQ(sub->input(1)->producer()->kind(), OpKind::kConstant);
}

// OPT's residual add between layers: the second product's result (rows [B*T, C], through a
// copy that changes nothing) plus the residual stream viewed as rows, viewed back to [B, T, C]
// for the layer norm and the next residual add. The view moves before the add: the add reads
// the residual stream itself and a view of the product, and the add and the layer norm are
// one kernel (which also writes the sum for the next residual add).
constexpr char kResidualRows[] = R"(graph(%x: bf16[8,64], %w: bf16[64,16], %h: bf16[2,4,16],
                                          %g: bf16[16], %b: bf16[16]) {
    %e: bf16[2,4,16] = mul(%h, %h)
    %er: bf16[8,16] = reshape(%e) {shape=[8,16]}
    %m: bf16[8,16] = matmul(%x, %w)
    %c: bf16[8,16] = contiguous(%m)
    %a: bf16[8,16] = add(%er, %c)
    %ar: bf16[2,4,16] = reshape(%a) {shape=[2,4,16]}
    %n: bf16[2,4,16] = layer_norm(%ar, %g, %b) {eps=1e-05, normalized_ndim=1}
    %next: bf16[2,4,16] = add(%ar, %e)
    return(%n, %next)
  })";

TEST_F(MoveReshapesTest, AResidualAddOfRowsViewedBackJoinsTheLayerNormAfterIt) {
  ASSERT_TRUE(Run(kResidualRows));
  const graph::Node* norm = Last(OpKind::kLayerNorm);
  ASSERT_NE(norm, nullptr);
  const graph::Node* add = norm->input(0)->producer();
  ASSERT_EQ(add->kind(), OpKind::kAdd) << graph::PrintGraph(*graph_);
  EXPECT_EQ(add->output()->type().sizes, (std::vector<int64_t>{2, 4, 16}));
  // It reads %e itself and the copy of a view of the product.
  EXPECT_EQ(add->input(0)->producer()->kind(), OpKind::kMul) << graph::PrintGraph(*graph_);
  const graph::Node* copy = add->input(1)->producer();
  ASSERT_EQ(copy->kind(), OpKind::kContiguous) << graph::PrintGraph(*graph_);
  ASSERT_EQ(copy->input(0)->producer()->kind(), OpKind::kReshape);
  EXPECT_EQ(copy->input(0)->producer()->input(0)->producer()->kind(), OpKind::kMatmul);
  // Fused: the mul, the add and the layer norm (which also writes the sum) are one kernel, the
  // next residual add another or the same; no kernel reads a view of another's result.
  auto full = Fused(kResidualRows);
  ASSERT_NE(full, nullptr);
  const graph::Node* group_of_norm = nullptr;
  for (const auto& n : full->nodes()) {
    if (n->kind() == OpKind::kFusionGroup && ReducesRows(*n)) group_of_norm = n.get();
  }
  ASSERT_NE(group_of_norm, nullptr) << graph::PrintGraph(*full);
  bool has_add = false;
  for (const auto& b : group_of_norm->body()->nodes()) has_add |= b->kind() == OpKind::kAdd;
  EXPECT_TRUE(has_add) << graph::PrintGraph(*full);
  for (const auto& n : full->nodes()) {
    if (n->kind() == OpKind::kReshape) {
      const graph::Node* p = n->input(0)->producer();
      EXPECT_TRUE(p == nullptr || p->kind() != OpKind::kFusionGroup) << graph::PrintGraph(*full);
    }
  }
}

// OPT's residual add after attention: the residual stream (a kernel's result that a layer
// norm also reads, so a kernel stores it anyway) plus the output projection viewed as [B, T,
// C] through a copy, viewed as rows [B*T, C] for the next layer norm and residual add. The
// view moves before the add, onto the stored residual stream and the product itself: the add
// and the layer norm after it are one kernel.
constexpr char kResidualAfterAttention[] = R"(graph(%x: bf16[8,64], %w: bf16[64,16],
    %h: bf16[2,4,16], %g: bf16[16], %b: bf16[16], %r: bf16[8,16]) {
    %e: bf16[2,4,16] = mul(%h, %h)
    %n0: bf16[2,4,16] = layer_norm(%e, %g, %b) {eps=1e-05, normalized_ndim=1}
    %m: bf16[8,16] = matmul(%x, %w)
    %mv: bf16[2,4,16] = reshape(%m) {shape=[2,4,16]}
    %c: bf16[2,4,16] = contiguous(%mv)
    %a: bf16[2,4,16] = add(%e, %c)
    %ar: bf16[8,16] = reshape(%a) {shape=[8,16]}
    %n: bf16[8,16] = layer_norm(%ar, %g, %b) {eps=1e-05, normalized_ndim=1}
    %next: bf16[8,16] = add(%ar, %r)
    return(%n0, %n, %next)
  })";

TEST_F(MoveReshapesTest, AResidualAddOfAStoredStreamViewedAsRowsJoinsTheLayerNormAfterIt) {
  ASSERT_TRUE(Run(kResidualAfterAttention));
  const graph::Node* norm = Last(OpKind::kLayerNorm, /*rank=*/2);
  ASSERT_NE(norm, nullptr);
  const graph::Node* add = norm->input(0)->producer();
  ASSERT_EQ(add->kind(), OpKind::kAdd) << graph::PrintGraph(*graph_);
  EXPECT_EQ(add->output()->type().sizes, (std::vector<int64_t>{8, 16}));
  // A view of the residual stream, and the copy of the product itself (its views gone).
  const graph::Node* stream = add->input(0)->producer();
  ASSERT_EQ(stream->kind(), OpKind::kReshape) << graph::PrintGraph(*graph_);
  EXPECT_EQ(stream->input(0)->producer()->kind(), OpKind::kMul);
  const graph::Node* copy = add->input(1)->producer();
  ASSERT_EQ(copy->kind(), OpKind::kContiguous) << graph::PrintGraph(*graph_);
  EXPECT_EQ(copy->input(0)->producer()->kind(), OpKind::kMatmul) << graph::PrintGraph(*graph_);
  // Fused: the add is in the second layer norm's kernel.
  auto full = Fused(kResidualAfterAttention);
  ASSERT_NE(full, nullptr);
  int adds_with_a_norm = 0;
  for (const auto& n : full->nodes()) {
    if (n->kind() != OpKind::kFusionGroup || !ReducesRows(*n)) continue;
    bool add = false;
    for (const auto& b : n->body()->nodes()) {
      const graph::Node* p = b->inputs().size() > 1 ? b->input(1)->producer() : nullptr;
      add |= b->kind() == OpKind::kAdd && p != nullptr && p->kind() == OpKind::kContiguous;
    }
    adds_with_a_norm += add;
  }
  EXPECT_EQ(adds_with_a_norm, 1) << graph::PrintGraph(*full);
  // A value only elementwise ops read is not stored anyway: its view stays after the add.
  EXPECT_FALSE(Run(R"(graph(%m: bf16[8,16], %h: bf16[2,4,16], %g: bf16[16], %b: bf16[16]) {
      %e: bf16[2,4,16] = mul(%h, %h)
      %f: bf16[2,4,16] = exp(%e)
      %mv: bf16[2,4,16] = reshape(%m) {shape=[2,4,16]}
      %a: bf16[2,4,16] = add(%e, %mv)
      %ar: bf16[8,16] = reshape(%a) {shape=[8,16]}
      %n: bf16[8,16] = layer_norm(%ar, %g, %b) {eps=1e-05, normalized_ndim=1}
      return(%n, %f)
    })")) << graph::PrintGraph(*graph_);
}

// A layer norm over the last dim of a bf16 value `x` as AOTAutograd decomposes it: in f32,
// each row's variance and mean, the weight %g and bias %b, cast back to bf16 as `out`.
// `sizes` are x's ("2,4,16"), `stats` the same with the last dim 1, `dim` the last dim.
std::string DecomposedLayerNorm(const std::string& x, const std::string& out,
                                const std::string& sizes, const std::string& stats, int dim) {
  const std::string o = "%" + out, d = std::to_string(dim);
  return o + "_f: f32[" + sizes + "] = cast(%" + x + ") {dtype=\"f32\"}\n" +
         o + "_v: f32[" + stats + "] = var(" + o + "_f) {correction=0, dims=[" + d +
         "], keepdim=1}\n" +
         o + "_m: f32[" + stats + "] = mean(" + o + "_f) {dims=[" + d + "], keepdim=1}\n" +
         o + "_e: f64[] = constant() {dtype=\"f64\", value=1e-05, wrapped=1}\n" +
         o + "_ve: f32[" + stats + "] = add(" + o + "_v, " + o + "_e)\n" +
         o + "_r: f32[" + stats + "] = rsqrt(" + o + "_ve)\n" +
         o + "_c: f32[" + sizes + "] = sub(" + o + "_f, " + o + "_m)\n" +
         o + "_n: f32[" + sizes + "] = mul(" + o + "_c, " + o + "_r)\n" +
         o + "_w: f32[" + sizes + "] = mul(" + o + "_n, %g)\n" +
         o + "_b: f32[" + sizes + "] = add(" + o + "_w, %b)\n" +
         o + ": bf16[" + sizes + "] = cast(" + o + "_b) {dtype=\"bf16\"}\n";
}

// One decoder layer of OPT as its ATen graph reaches the importer (B=2, T=4, C=16, FFN 32):
// the layer norms decomposed; the residual stream alternates between [B, T, C] and rows
// [B*T, C]. After attention (a product here, of the first norm's rows) the output
// projection, viewed as [B, T, C] and copied, is added to the stream, which is viewed as
// rows for the second norm and the MLP; the MLP's sum is viewed back as [B, T, C] for the
// next layer. `in` is the stream coming in, `out` the one going out.
std::string OptLayer(const std::string& in, const std::string& out, const std::string& l) {
  return DecomposedLayerNorm(in, "n1" + l, "2,4,16", "2,4,1", 2) +
         "%q" + l + ": bf16[8,16] = reshape(%n1" + l + ") {shape=[8,16]}\n" +
         "%att" + l + ": bf16[8,16] = matmul(%q" + l + ", %wa)\n" +
         "%wot" + l + ": bf16[16,16] = permute(%wo) {dims=[1,0]}\n" +
         "%o" + l + ": bf16[8,16] = addmm(%bo, %att" + l + ", %wot" + l +
         ") {alpha=1.0, beta=1.0}\n" +
         "%ov" + l + ": bf16[2,4,16] = reshape(%o" + l + ") {shape=[2,4,16]}\n" +
         "%oc" + l + ": bf16[2,4,16] = contiguous(%ov" + l + ")\n" +
         "%s" + l + ": bf16[2,4,16] = add(%" + in + ", %oc" + l + ")\n" +
         "%sr" + l + ": bf16[8,16] = reshape(%s" + l + ") {shape=[-1,16]}\n" +
         DecomposedLayerNorm("sr" + l, "n2" + l, "8,16", "8,1", 1) +
         "%w1t" + l + ": bf16[16,32] = permute(%w1) {dims=[1,0]}\n" +
         "%h" + l + ": bf16[8,32] = addmm(%b1, %n2" + l + ", %w1t" + l +
         ") {alpha=1.0, beta=1.0}\n" +
         "%hr" + l + ": bf16[8,32] = relu(%h" + l + ")\n" +
         "%w2t" + l + ": bf16[32,16] = permute(%w2) {dims=[1,0]}\n" +
         "%f" + l + ": bf16[8,16] = addmm(%bo, %hr" + l + ", %w2t" + l +
         ") {alpha=1.0, beta=1.0}\n" +
         "%fc" + l + ": bf16[8,16] = contiguous(%f" + l + ")\n" +
         "%t" + l + ": bf16[8,16] = add(%sr" + l + ", %fc" + l + ")\n" +
         "%" + out + ": bf16[2,4,16] = reshape(%t" + l + ") {shape=[2,4,16]}\n";
}

// Two OPT layers after the embeddings' sum, and the final layer norm.
std::string TwoOptLayers() {
  return "graph(%e0: bf16[2,4,16], %e1: bf16[2,4,16], %g: bf16[16], %b: bf16[16], "
         "%wa: bf16[16,16], %wo: bf16[16,16], %bo: bf16[16], %w1: bf16[32,16], "
         "%b1: bf16[32], %w2: bf16[16,32]) {\n"
         "%x0: bf16[2,4,16] = add(%e0, %e1)\n" +
         OptLayer("x0", "x1", "a") + OptLayer("x1", "x2", "b") +
         DecomposedLayerNorm("x2", "y", "2,4,16", "2,4,1", 2) + "return(%y)\n}";
}

// Every residual add of OPT's layers is in the kernel of the layer norm that reads its sum:
// the add after attention too, whose sum the norm reads as rows [B*T, C] and the next
// residual add as [B, T, C]. The stream coming in is stored anyway (a norm and an add read
// it), so the rows view moves before the add, onto it and the projection's result.
TEST_F(MoveReshapesTest, EveryResidualAddOfOptLayersJoinsTheLayerNormAfterIt) {
  auto g = Fused(TwoOptLayers());
  ASSERT_NE(g, nullptr);
  ASSERT_TRUE(graph::VerifyGraph(*g).ok()) << graph::PrintGraph(*g);
  int groups = 0, norms = 0, adds = 0;
  for (const auto& n : g->nodes()) {
    if (n->kind() != OpKind::kFusionGroup) continue;
    ++groups;
    if (!ReducesRows(*n)) continue;
    ++norms;
    for (const auto& b : n->body()->nodes()) {
      adds += b->kind() == OpKind::kAdd && b->output()->type().dtype == graph::DType::kBF16;
    }
  }
  // Five norms, each its own kernel with the add before it (the embeddings' sum, and two
  // residual adds per layer); nothing else is a kernel (the ReLU is the product's epilogue).
  EXPECT_EQ(norms, 5) << graph::PrintGraph(*g);
  EXPECT_EQ(adds, 5) << graph::PrintGraph(*g);
  EXPECT_EQ(groups, 5) << graph::PrintGraph(*g);
}

TEST_F(MoveReshapesTest, ViewsStayWhereAnOperandBroadcastsInPartOfAGroup) {
  // The mask is per window but the same for every batch: merging [batches, windows] back
  // would need it [24, ...], which only a copy gives. Both views stay.
  EXPECT_FALSE(Run(R"(graph(%s: f32[6,4,3,49,49], %mask: f32[1,4,1,49,49]) {
      %b: f32[6,4,3,49,49] = add(%s, %mask)
      %r: f32[24,3,49,49] = reshape(%b) {shape=[24,3,49,49]}
      %y: f32[24,3,49,49] = mul(%r, %r)
      return(%y)
    })")) << graph::PrintGraph(*graph_);
  // A softmax over a dim the view changes is not the same rows: the view stays before it
  // (the exp may move after it).
  Run(R"(graph(%s: f32[6,4,3,49,49]) {
      %e: f32[6,4,3,49,49] = exp(%s)
      %r: f32[6,4,3,2401] = reshape(%e) {shape=[6,4,3,2401]}
      %y: f32[6,4,3,2401] = softmax(%r) {dim=-1}
      return(%y)
    })");
  const graph::Node* softmax = Last(OpKind::kSoftmax);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->output()->type().sizes, (std::vector<int64_t>{6, 4, 3, 2401}))
      << graph::PrintGraph(*graph_);
}

}  // namespace
}  // namespace torchfuse::fusion
