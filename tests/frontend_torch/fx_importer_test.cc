#include "frontend_torch/fx_importer.h"

#include <fstream>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "common/status_macros.h"
#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "frontend_torch/model_source.h"
#include "frontend_torch/torchscript_importer.h"
#include "graph/printer.h"
#include "../support/text.h"

namespace torchfuse::frontend {
namespace {

std::string Doc(const std::string& nodes) {
  return R"({"format": "torchfuse-fx", "version": 1, "nodes": [)" + nodes + "]}";
}

// Hand-written GeLU as torchfuse's Python side writes it for `0.5 * x * (1 + tanh(...))`.
const char kGeluNodes[] = R"(
  {"name": "x", "op": "placeholder"},
  {"name": "mul", "op": "call_function", "target": "aten::mul", "args": [{"node": "x"}, 0.5], "kwargs": {}},
  {"name": "pow_1", "op": "call_function", "target": "aten::pow", "args": [{"node": "x"}, 3], "kwargs": {}},
  {"name": "mul_1", "op": "call_function", "target": "aten::mul", "args": [{"node": "pow_1"}, 0.044715], "kwargs": {}},
  {"name": "add", "op": "call_function", "target": "aten::add", "args": [{"node": "x"}, {"node": "mul_1"}], "kwargs": {}},
  {"name": "mul_2", "op": "call_function", "target": "aten::mul", "args": [{"node": "add"}, 0.7978845608], "kwargs": {}},
  {"name": "tanh", "op": "call_function", "target": "aten::tanh", "args": [{"node": "mul_2"}], "kwargs": {}},
  {"name": "add_1", "op": "call_function", "target": "aten::add", "args": [{"node": "tanh"}, 1], "kwargs": {}},
  {"name": "mul_3", "op": "call_function", "target": "aten::mul", "args": [{"node": "mul"}, {"node": "add_1"}], "kwargs": {}},
  {"name": "output", "op": "output", "args": [{"node": "mul_3"}]})";

// An FX document imported for one input of type `spec` (its sizes may be names).
absl::StatusOr<ImportedModel> ImportFx(const std::string& nodes, const graph::TensorType& spec) {
  TF_ASSIGN_OR_RETURN(auto g, GraphFromFxJson(Doc(nodes), {}));
  return ImportTorchScriptGraph(*g, {spec});
}

// The model's first output for `x`, the symbols of `spec` bound to x's sizes.
absl::StatusOr<at::Tensor> RunBound(const ImportedModel& model, const graph::TensorType& spec,
                                    const at::Tensor& x) {
  graph::SymbolBinding binding;
  TF_RETURN_IF_ERROR(binding.Bind(spec.sizes, x.sizes().vec()));
  ReferenceExecutor run(&model.opaque);
  run.set_binding(&binding);
  TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> out, run.Run(*model.graph, {x}));
  return out.at(0);
}

at::Tensor Gelu(const at::Tensor& x) {
  return 0.5 * x * (1 + at::tanh(0.7978845608 * (x + 0.044715 * x.pow(3))));
}

// The f64 reference (InDouble) computes in f64 where the model casts to f32, so that it is
// exact where the model upcasts to compute (a bf16 input's `.float()`), while casts to bf16
// still round as the model asks.
TEST(ModelSourceTest, TheF64ReferenceWidensCastsToF32AndKeepsRoundingCasts) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
    graph(%x : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %f32 : int = prim::Constant[value=6]()
      %bf16 : int = prim::Constant[value=15]()
      %a : Tensor = aten::to(%x, %f32, %false, %false, %none)
      %b : Tensor = aten::to(%x, %bf16, %false, %false, %none)
      %c : Tensor = aten::mul(%a, %a)
      %r : (Tensor, Tensor, Tensor) = prim::TupleConstruct(%a, %b, %c)
      return (%r))IR",
                      g.get());
  auto source = ModelSource::FromGraph(g, "TorchScript");
  ASSERT_TRUE(source.ok()) << source.status();
  const at::Tensor x = at::randn({5, 7}, at::kDouble) / 3;
  const auto wide = source->InDouble().RunEager({x}).toTuple()->elements();
  EXPECT_EQ(wide[0].toTensor().scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(wide[0].toTensor(), x));
  EXPECT_TRUE(at::equal(wide[2].toTensor(), x * x));
  EXPECT_EQ(wide[1].toTensor().scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(wide[1].toTensor(), x.to(at::kBFloat16)));
  // The source itself still casts to f32.
  const auto plain = source->RunEager({x}).toTuple()->elements();
  EXPECT_EQ(plain[0].toTensor().scalar_type(), at::kFloat);
  EXPECT_FALSE(at::equal(plain[0].toTensor().to(at::kDouble), x));
}

TEST(FxImporterTest, HandWrittenGeluRunsLikeEagerAndImports) {
  auto g = GraphFromFxJson(Doc(kGeluNodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto source = ModelSource::FromGraph(*g, "FX");
  ASSERT_TRUE(source.ok()) << source.status();
  const at::Tensor x = at::randn({8, 33});
  EXPECT_TRUE(at::allclose(source->RunEager({x}).toTensor(), Gelu(x), 1e-6, 1e-6));
  auto model = ImportTorchScriptGraph(**g, {graph::TensorType{graph::DType::kF32, {8, 33}}});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string ir = graph::PrintGraph(*model->graph);
  EXPECT_NE(ir.find("tanh("), std::string::npos) << ir;
  EXPECT_NE(ir.find("pow("), std::string::npos) << ir;
  EXPECT_FALSE(model->returns_tuple);
}

TEST(FxImporterTest, AttributesModulesAndKeywordsBecomeConstantsAndOps) {
  // nn.Linear, nn.GELU('tanh'), nn.LayerNorm, softmax(dim=-1), returning a tuple.
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "w", "op": "get_attr", "target": "lin.weight"},
    {"name": "b", "op": "get_attr", "target": "lin.bias"},
    {"name": "lin", "op": "call_function", "target": "aten::linear", "args": [{"node": "x"}, {"node": "w"}, {"node": "b"}], "kwargs": {}},
    {"name": "g", "op": "call_function", "target": "aten::gelu", "args": [{"node": "lin"}], "kwargs": {"approximate": "tanh"}},
    {"name": "lnw", "op": "get_attr", "target": "ln.weight"},
    {"name": "ln", "op": "call_function", "target": "aten::layer_norm", "args": [{"node": "g"}, [32], {"node": "lnw"}, null, 1e-5], "kwargs": {}},
    {"name": "sm", "op": "call_function", "target": "aten::softmax", "args": [{"node": "ln"}], "kwargs": {"dim": -1, "dtype": {"dtype": "torch.float32"}}},
    {"name": "output", "op": "output", "args": [[{"node": "sm"}, {"node": "g"}]]})";
  std::map<std::string, at::Tensor> attrs = {{"lin.weight", at::randn({32, 16})},
                                             {"lin.bias", at::randn({32})},
                                             {"ln.weight", at::rand({32}) + 0.5}};
  auto g = GraphFromFxJson(Doc(nodes), attrs);
  ASSERT_TRUE(g.ok()) << g.status();
  auto source = ModelSource::FromGraph(*g, "FX");
  ASSERT_TRUE(source.ok()) << source.status();
  const at::Tensor x = at::randn({5, 16});
  const at::Tensor gelu = at::gelu(at::linear(x, attrs["lin.weight"], attrs["lin.bias"]), "tanh");
  const at::Tensor want =
      at::softmax(at::layer_norm(gelu, {32}, attrs["ln.weight"], {}, 1e-5), -1);
  auto out = source->RunEager({x}).toTuple()->elements();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(at::allclose(out[0].toTensor(), want, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(out[1].toTensor(), gelu, 1e-5, 1e-6));
  auto model = ImportTorchScriptGraph(**g, {graph::TensorType{graph::DType::kF32, {5, 16}}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->returns_tuple);
  const std::string ir = graph::PrintGraph(*model->graph);
  EXPECT_NE(ir.find("linear("), std::string::npos) << ir;
  EXPECT_NE(ir.find("layer_norm("), std::string::npos) << ir;
}

TEST(FxImporterTest, OpsOnWeightsStayOpsWhileConstantsAloneFold) {
  // An ATen-level linear (mm with the weight transposed) beside a table computed from a
  // factory and a small buffer alone: the table folds into one constant, the transposed weight
  // (128 KiB) stays a view of the weight itself (no copy of it is made at import).
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "w", "op": "get_attr", "target": "lin.weight"},
    {"name": "wt", "op": "call_function", "target": "aten::t", "args": [{"node": "w"}], "kwargs": {}},
    {"name": "mm", "op": "call_function", "target": "aten::mm", "args": [{"node": "x"}, {"node": "wt"}], "kwargs": {}},
    {"name": "pos", "op": "call_function", "target": "aten::arange", "args": [256], "kwargs": {"dtype": {"dtype": "torch.float32"}}},
    {"name": "freq", "op": "get_attr", "target": "rope.freq"},
    {"name": "angle", "op": "call_function", "target": "aten::mul", "args": [{"node": "pos"}, {"node": "freq"}], "kwargs": {}},
    {"name": "table", "op": "call_function", "target": "aten::cos", "args": [{"node": "angle"}], "kwargs": {}},
    {"name": "out", "op": "call_function", "target": "aten::add", "args": [{"node": "mm"}, {"node": "table"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "out"}]})";
  const at::Tensor w = at::randn({256, 128});
  const at::Tensor freq = at::rand({256});
  auto g = GraphFromFxJson(Doc(nodes), {{"lin.weight", w}, {"rope.freq", freq}});
  ASSERT_TRUE(g.ok()) << g.status();
  auto model = ImportTorchScriptGraph(**g, {graph::TensorType{graph::DType::kF32, {5, 128}}});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string ir = graph::PrintGraph(*model->graph);
  EXPECT_EQ(ir.find("arange"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("cos("), std::string::npos) << ir;
  EXPECT_EQ(ir.find("= mul("), std::string::npos) << ir;
  std::vector<const graph::Node*> params;
  for (const auto& n : model->graph->nodes()) {
    if (n->kind() == graph::OpKind::kParam) params.push_back(n.get());
  }
  ASSERT_EQ(params.size(), 2u) << ir;  // the weight, and the folded table
  bool weight_itself = false;
  for (const graph::Node* p : params) {
    ASSERT_NE(p->data(), nullptr);
    const at::Tensor held = TensorFromData(*p->data(), at::kCPU);
    if (held.data_ptr() == w.data_ptr()) weight_itself = true;
  }
  EXPECT_TRUE(weight_itself) << ir;
  const at::Tensor x = at::randn({5, 128});
  ReferenceExecutor run(&model->opaque);
  auto out = run.Run(*model->graph, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  const at::Tensor want = at::mm(x, w.t()) + at::cos(at::arange(256, at::kFloat) * freq);
  EXPECT_TRUE(at::allclose(out->at(0), want, 1e-5, 1e-5));
}

TEST(FxImporterTest, OpsWithoutAnIrEquivalentRunThroughTorch) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "c", "op": "call_function", "target": "aten::cumsum", "args": [{"node": "x"}, 1], "kwargs": {}},
    {"name": "e", "op": "call_function", "target": "aten::exp", "args": [{"node": "c"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "e"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto model = ImportTorchScriptGraph(**g, {graph::TensorType{graph::DType::kF32, {4, 8}}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->opaque.size(), 1u);
  EXPECT_EQ(model->opaque[0]->target, "aten::cumsum");
  const at::Tensor x = at::randn({4, 8});
  auto source = ModelSource::FromGraph(*g, "FX");
  EXPECT_TRUE(at::allclose(source->RunEager({x}).toTensor(), at::exp(at::cumsum(x, 1))));
}

// AOTAutograd passes None for arguments that a schema types Tensor, not Tensor? (fused
// attention's backward ops, whose attn_bias is None without a mask); ATen takes it as an
// undefined tensor, as torch's Python binding passes it. The graph holds an undefined tensor
// there (prim::AutogradZero) and the op receives it: _embedding_bag_dense_backward says so
// when its maximum_indices (read in max mode only) is undefined. Before, TorchScript's schema
// matching refused the node, and with it the whole graph.
TEST(FxImporterTest, NoneForATensorArgumentReachesTheOpAsAnUndefinedTensor) {
  const std::string nodes = R"(
    {"name": "grad", "op": "placeholder"},
    {"name": "indices", "op": "placeholder"},
    {"name": "offset2bag", "op": "placeholder"},
    {"name": "bag_size", "op": "placeholder"},
    {"name": "b", "op": "call_function", "target": "aten::_embedding_bag_dense_backward",
     "args": [{"node": "grad"}, {"node": "indices"}, {"node": "offset2bag"}, {"node": "bag_size"},
              null, 10, false, 0, null, -1], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "b"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const torch::jit::Node* call = nullptr;
  for (const torch::jit::Node* n : (*g)->nodes()) {
    if (n->kind().toQualString() == std::string("aten::_embedding_bag_dense_backward")) call = n;
  }
  ASSERT_NE(call, nullptr) << **g;
  EXPECT_EQ(call->input(4)->node()->kind(), c10::prim::AutogradZero) << **g;
  EXPECT_EQ(call->input(4)->type()->kind(), c10::TypeKind::TensorType);
  // per_sample_weights is Tensor?: its None stays None.
  EXPECT_EQ(call->input(8)->type()->kind(), c10::TypeKind::NoneType) << **g;
  auto model = ImportTorchScriptGraph(
      **g, {graph::TensorType{graph::DType::kF32, {2, 4}}, graph::TensorType{graph::DType::kI64, {8}},
            graph::TensorType{graph::DType::kI64, {8}}, graph::TensorType{graph::DType::kI64, {2}}});
  ASSERT_FALSE(model.ok());
  const std::string message(model.status().message());
  EXPECT_NE(message.find("undefined Tensor"), std::string::npos) << message;
  EXPECT_NE(message.find("maximum_indices"), std::string::npos) << message;
  EXPECT_NE(message.find("_embedding_bag_dense_backward"), std::string::npos) << message;
}

// nn.ReLU(inplace=True) as FX capture writes it (aten::relu_) on a value that is read again
// afterwards: the later read sees the relu's result, as in eager.
TEST(FxImporterTest, InPlaceOpsOnFreshValuesAreFunctional) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "y", "op": "call_function", "target": "aten::mul", "args": [{"node": "x"}, 3.0], "kwargs": {}},
    {"name": "r", "op": "call_function", "target": "aten::relu_", "args": [{"node": "y"}], "kwargs": {}},
    {"name": "s", "op": "call_function", "target": "aten::add", "args": [{"node": "y"}, {"node": "r"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "s"}]})";
  auto model = ImportFx(nodes, graph::TensorType{graph::DType::kF32, {6, 10}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->opaque.empty());
  const at::Tensor x = at::randn({6, 10});
  auto out = RunBound(*model, graph::TensorType{graph::DType::kF32, {6, 10}}, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::allclose(*out, 2 * at::relu(3 * x)));
}

// `x[:, i]` as FX writes it: aten::index with [None, i].
TEST(FxImporterTest, IndexListsWithNoneImport) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "i", "op": "placeholder"},
    {"name": "p", "op": "call_function", "target": "aten::index", "args": [{"node": "x"}, [null, {"node": "i"}]], "kwargs": {}},
    {"name": "e", "op": "call_function", "target": "aten::exp", "args": [{"node": "p"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "e"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto model = ImportTorchScriptGraph(
      **g, {graph::TensorType{graph::DType::kF32, {5, 7}}, graph::TensorType{graph::DType::kI64, {3}}});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->opaque.size(), 1u);
  EXPECT_EQ(model->opaque[0]->target, "aten::index");
  const at::Tensor x = at::randn({5, 7}), i = at::tensor({6, -2, 0}, at::kLong);
  ReferenceExecutor run(&model->opaque);
  auto out = run.Run(*model->graph, {x, i});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::allclose(out->at(0), at::exp(x.index({at::indexing::Slice(), i}))));
}

TEST(FxImporterTest, InfiniteAndNanScalarsArriveAsFloats) {
  // JSON has no inf or nan: the Python side writes {"float": "-inf"} (a causal mask's fill).
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "c", "op": "call_function", "target": "aten::gt", "args": [{"node": "x"}, 0.5], "kwargs": {}},
    {"name": "m", "op": "call_function", "target": "aten::masked_fill", "args": [{"node": "x"}, {"node": "c"}, {"float": "-inf"}], "kwargs": {}},
    {"name": "l", "op": "call_function", "target": "aten::clamp", "args": [{"node": "m"}], "kwargs": {"max": {"float": "inf"}}},
    {"name": "output", "op": "output", "args": [{"node": "l"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto source = ModelSource::FromGraph(*g, "FX");
  ASSERT_TRUE(source.ok()) << source.status();
  const at::Tensor x = at::rand({6, 7});
  const at::Tensor want = x.masked_fill(x > 0.5, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(at::equal(source->RunEager({x}).toTensor(), want));
  EXPECT_GT((x > 0.5).sum().item<int64_t>(), 0);
  auto bad = GraphFromFxJson(Doc(R"({"name": "x", "op": "placeholder"},
      {"name": "m", "op": "call_function", "target": "aten::mul", "args": [{"node": "x"}, {"float": "huge"}], "kwargs": {}},
      {"name": "output", "op": "output", "args": [{"node": "m"}]})"), {});
  EXPECT_FALSE(bad.ok());
}

TEST(FxImporterTest, MultiOutputOpsAreIndexedWithGetitem) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "vm", "op": "call_function", "target": "aten::var_mean", "args": [{"node": "x"}, [1]], "kwargs": {"keepdim": true}},
    {"name": "m", "op": "call_function", "target": "getitem", "args": [{"node": "vm"}, 1], "kwargs": {}},
    {"name": "s", "op": "call_function", "target": "aten::sub", "args": [{"node": "x"}, {"node": "m"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "s"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const at::Tensor x = at::randn({3, 7});
  auto source = ModelSource::FromGraph(*g, "FX");
  EXPECT_TRUE(at::allclose(source->RunEager({x}).toTensor(), x - x.mean(1, true), 1e-5, 1e-6));
}

TEST(FxImporterTest, MaxWithUnusedIndicesIsAReductionNotATorchOp) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "mx", "op": "call_function", "target": "aten::max", "args": [{"node": "x"}], "kwargs": {"dim": -1, "keepdim": true}},
    {"name": "m", "op": "call_function", "target": "getitem", "args": [{"node": "mx"}, 0], "kwargs": {}},
    {"name": "s", "op": "call_function", "target": "aten::sub", "args": [{"node": "x"}, {"node": "m"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "s"}]})";
  auto g = GraphFromFxJson(Doc(nodes), {});
  ASSERT_TRUE(g.ok()) << g.status();
  auto model = ImportTorchScriptGraph(**g, {graph::TensorType{graph::DType::kF32, {3, 7}}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->opaque.empty());
  EXPECT_NE(graph::PrintGraph(*model->graph).find("amax("), std::string::npos);
}

// A graph for every size, as the Python side writes one: sizes read with aten::size, a product
// of them, and views whose shapes mix them with constants.
TEST(FxImporterTest, SizesComputedInTheGraphMakeViewsOfSymbolicShapes) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "t", "op": "call_function", "target": "aten::size", "args": [{"node": "x"}, 1], "kwargs": {}},
    {"name": "bt", "op": "call_function", "target": "aten::mul", "args": [{"node": "t"}, 4], "kwargs": {}},
    {"name": "flat", "op": "call_function", "target": "aten::view", "args": [{"node": "x"}, [{"node": "bt"}, 16]], "kwargs": {}},
    {"name": "e", "op": "call_function", "target": "aten::exp", "args": [{"node": "flat"}], "kwargs": {}},
    {"name": "back", "op": "call_function", "target": "aten::view", "args": [{"node": "e"}, [4, {"node": "t"}, -1]], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "back"}]})";
  const graph::TensorType t = *graph::ParseTensorType("f32[4,T,16]");
  auto model = ImportFx(nodes, t);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->graph->outputs()[0]->type(), t);
  bool joined = false;
  for (const auto& n : model->graph->nodes()) {
    joined |= n->output(0)->type().ToString() == "f32[4*T,16]";
  }
  EXPECT_TRUE(joined);
  const at::Tensor x = at::randn({4, 9, 16});
  auto out = RunBound(*model, t, x);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::allclose(*out, at::exp(x)));
}

// An attention's scale computed from a dynamic head dim, as AOTAutograd writes
// `x / x.shape[1] ** 0.5`: a scalar tensor of a size, cast and raised in f64, cast back (the
// Python side writes prims' convert_element_type as _to_copy).
TEST(FxImporterTest, ScalarsComputedFromDynamicSizesImportAndFollowTheSize) {
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "t", "op": "call_function", "target": "aten::size", "args": [{"node": "x"}, 1], "kwargs": {}},
    {"name": "st", "op": "call_function", "target": "aten::scalar_tensor", "args": [{"node": "t"}], "kwargs": {}},
    {"name": "c", "op": "call_function", "target": "aten::_to_copy", "args": [{"node": "st"}], "kwargs": {"dtype": {"dtype": "torch.float64"}}},
    {"name": "h", "op": "call_function", "target": "aten::scalar_tensor", "args": [0.5], "kwargs": {"dtype": {"dtype": "torch.float64"}}},
    {"name": "p", "op": "call_function", "target": "aten::pow", "args": [{"node": "c"}, {"node": "h"}], "kwargs": {}},
    {"name": "c2", "op": "call_function", "target": "aten::_to_copy", "args": [{"node": "p"}], "kwargs": {"dtype": {"dtype": "torch.float32"}}},
    {"name": "y", "op": "call_function", "target": "aten::div", "args": [{"node": "x"}, {"node": "c2"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [[{"node": "y"}]]})";
  const graph::TensorType t = *graph::ParseTensorType("f32[B,T]");
  auto model = ImportFx(nodes, t);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->graph->outputs()[0]->type(), t);
  for (int64_t len : {7, 64, 1000}) {
    const at::Tensor x = at::randn({3, len});
    auto out = RunBound(*model, t, x);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(at::allclose(*out, x / std::sqrt(static_cast<double>(len)))) << len;
  }
}

TEST(FxImporterTest, FullLikeIsAnExpandedConstantThatFuses) {
  // _safe_softmax's where(rows of -inf, zeros_like(p), p), with full_like's fill and
  // ones_like too: scalars expanded to the operand, no torch op.
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "z", "op": "call_function", "target": "aten::full_like", "args": [{"node": "x"}, 0], "kwargs": {}},
    {"name": "f", "op": "call_function", "target": "aten::full_like", "args": [{"node": "x"}, 2.5], "kwargs": {}},
    {"name": "o", "op": "call_function", "target": "aten::ones_like", "args": [{"node": "x"}], "kwargs": {}},
    {"name": "c", "op": "call_function", "target": "aten::gt", "args": [{"node": "x"}, 0], "kwargs": {}},
    {"name": "w", "op": "call_function", "target": "aten::where", "args": [{"node": "c"}, {"node": "z"}, {"node": "x"}], "kwargs": {}},
    {"name": "a", "op": "call_function", "target": "aten::add", "args": [{"node": "w"}, {"node": "f"}], "kwargs": {}},
    {"name": "m", "op": "call_function", "target": "aten::mul", "args": [{"node": "a"}, {"node": "o"}], "kwargs": {}},
    {"name": "output", "op": "output", "args": [{"node": "m"}]})";
  const graph::TensorType spec{graph::DType::kF32, {4, 6}};
  auto model = ImportFx(nodes, spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string text = graph::PrintGraph(*model->graph);
  EXPECT_EQ(text.find("opaque"), std::string::npos) << text;
  EXPECT_NE(text.find("expand"), std::string::npos) << text;
  const at::Tensor x = at::randn({4, 6});
  auto got = RunBound(*model, spec, x);
  ASSERT_TRUE(got.ok()) << got.status();
  const at::Tensor want = at::where(x > 0, at::zeros_like(x), x) + 2.5;
  EXPECT_TRUE(at::allclose(*got, want)) << *got << want;
}

TEST(FxImporterTest, AnyAndAllOverADimAreFloatReductions) {
  // _safe_softmax's test for rows whose every score is -inf, and any/all of floats (NaN counts
  // as nonzero), keepdim or not: no torch op, eager's answer.
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "e", "op": "call_function", "target": "aten::eq", "args": [{"node": "x"}, {"float": "-inf"}], "kwargs": {}},
    {"name": "n", "op": "call_function", "target": "aten::logical_not", "args": [{"node": "e"}], "kwargs": {}},
    {"name": "a", "op": "call_function", "target": "aten::any", "args": [{"node": "n"}, -1, true], "kwargs": {}},
    {"name": "l", "op": "call_function", "target": "aten::all", "args": [{"node": "e"}, 1], "kwargs": {}},
    {"name": "f", "op": "call_function", "target": "aten::any", "args": [{"node": "x"}, -1], "kwargs": {}},
    {"name": "output", "op": "output", "args": [[{"node": "a"}, {"node": "l"}, {"node": "f"}]]})";
  const graph::TensorType spec{graph::DType::kF32, {5, 6}};
  auto model = ImportFx(nodes, spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string text = graph::PrintGraph(*model->graph);
  EXPECT_EQ(text.find("opaque"), std::string::npos) << text;
  at::Tensor x = at::randn({5, 6});
  x[1] = -std::numeric_limits<float>::infinity();  // a row of -inf
  x[2].zero_();                                    // a row of zeros
  x[3][2] = std::numeric_limits<float>::quiet_NaN();
  x[4][0] = -std::numeric_limits<float>::infinity();
  ReferenceExecutor run(&model->opaque);
  auto out = run.Run(*model->graph, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  const at::Tensor e = x.eq(-std::numeric_limits<float>::infinity());
  EXPECT_TRUE(at::equal(out->at(0), e.logical_not().any(-1, true)));
  EXPECT_TRUE(at::equal(out->at(1), e.all(1)));
  EXPECT_TRUE(at::equal(out->at(2), x.any(-1)));
}

TEST(FxImporterTest, PaddingByNothingIsACopyAndOtherPaddingStaysInTorch) {
  // A window model's F.pad to a multiple of its window at a size that is one already: no
  // torch op; padding by something is torch's constant_pad_nd, with eager's answer.
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "p", "op": "call_function", "target": "aten::constant_pad_nd", "args": [{"node": "x"}, [0, 0, 0, 0], 0.0], "kwargs": {}},
    {"name": "g", "op": "call_function", "target": "aten::relu", "args": [{"node": "p"}], "kwargs": {}},
    {"name": "q", "op": "call_function", "target": "aten::constant_pad_nd", "args": [{"node": "g"}, [1, 2], -3.0], "kwargs": {}},
    {"name": "output", "op": "output", "args": [[{"node": "g"}, {"node": "q"}]]})";
  const graph::TensorType spec{graph::DType::kF32, {4, 6}};
  auto model = ImportFx(nodes, spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string text = graph::PrintGraph(*model->graph);
  EXPECT_EQ(test_support::CountOccurrences(text, "opaque"), 1) << text;
  const at::Tensor x = at::randn({4, 6});
  ReferenceExecutor run(&model->opaque);
  auto out = run.Run(*model->graph, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::equal(out->at(0), at::relu(x)));
  EXPECT_TRUE(at::equal(out->at(1), at::constant_pad_nd(at::relu(x), {1, 2}, -3.0)));
}

TEST(FxImporterTest, ContiguousInAnotherMemoryFormatStaysInTorch) {
  // contiguous() is torchfuse's copy (a view where the input is contiguous already);
  // contiguous(memory_format=channels_last) is torch's, with eager's strides.
  const std::string nodes = R"(
    {"name": "x", "op": "placeholder"},
    {"name": "t", "op": "call_function", "target": "aten::transpose", "args": [{"node": "x"}, 1, 3], "kwargs": {}},
    {"name": "c", "op": "call_function", "target": "aten::contiguous", "args": [{"node": "t"}], "kwargs": {}},
    {"name": "l", "op": "call_function", "target": "aten::contiguous", "args": [{"node": "t"}], "kwargs": {"memory_format": {"memory_format": "torch.channels_last"}}},
    {"name": "output", "op": "output", "args": [[{"node": "c"}, {"node": "l"}]]})";
  const graph::TensorType spec{graph::DType::kF32, {2, 3, 4, 5}};
  auto model = ImportFx(nodes, spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string text = graph::PrintGraph(*model->graph);
  EXPECT_EQ(test_support::CountOccurrences(text, "opaque"), 1) << text;
  EXPECT_EQ(test_support::CountOccurrences(text, "contiguous("), 1) << text;
  const at::Tensor x = at::randn({2, 3, 4, 5});
  ReferenceExecutor run(&model->opaque);
  auto out = run.Run(*model->graph, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  const at::Tensor t = x.transpose(1, 3);
  EXPECT_TRUE(at::equal(out->at(0), t));
  EXPECT_TRUE(out->at(0).is_contiguous());
  EXPECT_TRUE(at::equal(out->at(1), t));
  EXPECT_TRUE(out->at(1).is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(out->at(1).is_contiguous());
}

TEST(FxImporterTest, ErrorsNameTheNode) {
  struct Case {
    std::string doc;
    std::string expect;
  } cases[] = {
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "y", "op": "call_function", "target": "aten::exp", "args": [{"node": "nope"}], "kwargs": {}})"),
       "'nope'"},
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "y", "op": "call_function", "target": "mylib::frob", "args": [{"node": "x"}], "kwargs": {}})"),
       "node 'y' (mylib::frob)"},
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "y", "op": "call_function", "target": "frob", "args": [{"node": "x"}], "kwargs": {}})"),
       "not a registered op"},
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "bad", "op": "call_function", "target": "aten::gelu", "args": [{"node": "x"}, {"node": "x"}, 3], "kwargs": {}})"),
       "node 'bad'"},
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "w", "op": "get_attr", "target": "missing.weight"})"),
       "missing.weight"},
      {Doc(R"({"name": "x", "op": "placeholder"})"), "no output node"},
      {R"({"format": "torchfuse-fx", "version": 99, "nodes": []})", "version 99"},
      {R"({"format": "other"})", "not a torchfuse-fx document"},
      {R"({"format": )", "parse error at line 1"},
      // A value of the wrong type is an error, not a crash.
      {Doc(R"({"name": "x", "op": "placeholder"},
              {"name": "y", "op": "call_function", "target": "aten::exp", "args": [{"node": 5}], "kwargs": {}})"),
       "type must be string"},
      {R"({"format": "torchfuse-fx", "version": 1, "nodes": 7})", "no nodes"},
  };
  for (const Case& c : cases) {
    auto g = GraphFromFxJson(c.doc, {});
    ASSERT_FALSE(g.ok()) << c.doc;
    EXPECT_NE(std::string(g.status().message()).find(c.expect), std::string::npos)
        << g.status() << " lacks " << c.expect;
  }
}

// ---- torch.export archives, written by scripts/make_export_fixtures.py under torch 2.11 --------

std::string DataPath(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/" + name;
}

at::Tensor FromJson(const nlohmann::json& shape, const nlohmann::json& values) {
  return at::tensor(values.get<std::vector<float>>()).reshape(shape.get<std::vector<int64_t>>());
}

TEST(ExportImporterTest, ArchivesRunLikeTheEagerModuleTheyCameFrom) {
  for (const std::string name : {"mlp_block", "rmsnorm_pair"}) {
    std::ifstream f(DataPath(name + ".io.json"));
    std::stringstream ss;
    ss << f.rdbuf();
    const nlohmann::json io = nlohmann::json::parse(ss.str());
    const at::Tensor x = FromJson(io.at("shape"), io.at("input"));
    ASSERT_TRUE(IsExportedProgram(DataPath(name + ".pt2")));
    auto source = ModelSource::Load(DataPath(name + ".pt2"));
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_EQ(source->origin(), "torch.export");
    c10::IValue out = source->RunEager({x});
    std::vector<at::Tensor> got;
    if (out.isTensor()) {
      got.push_back(out.toTensor());
    } else {
      for (const c10::IValue& v : out.toTuple()->elements()) got.push_back(v.toTensor());
    }
    const nlohmann::json& outputs = io.at("outputs");
    ASSERT_EQ(got.size(), outputs.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      const at::Tensor want = FromJson(outputs[i].at("shape"), outputs[i].at("values"));
      EXPECT_TRUE(at::allclose(got[i], want, 1e-4, 1e-5)) << name << " output " << i;
    }
  }
}

TEST(ExportImporterTest, ImportsToFusibleIr) {
  auto source = ModelSource::Load(DataPath("mlp_block.pt2"));
  ASSERT_TRUE(source.ok()) << source.status();
  auto model = ImportTorchScriptGraph(*source->graph(),
                                      {graph::TensorType{graph::DType::kF32, {4, 16}}});
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string ir = graph::PrintGraph(*model->graph);
  for (const char* op : {"linear(", "tanh(", "layer_norm(", "softmax("}) {
    EXPECT_NE(ir.find(op), std::string::npos) << op << " in\n" << ir;
  }
  EXPECT_TRUE(model->opaque.empty());
}

TEST(ExportImporterTest, NonArchivesAndMissingFilesSayWhat) {
  auto missing = ModelSource::Load(DataPath("no_such_model.pt2"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(IsExportedProgram(DataPath("mlp_block.io.json")));
  auto not_zip = GraphFromExportedProgram(DataPath("mlp_block.io.json"));
  ASSERT_FALSE(not_zip.ok());
  EXPECT_NE(std::string(not_zip.status().message()).find("not a zip archive"), std::string::npos);
}

TEST(ModelSourceTest, TorchScriptModulesLoadAndMoveLikeExports) {
  auto source = ModelSource::Load(std::string(TF_TEST_MODELS_DIR) + "/gelu_traced.pt");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->origin(), "TorchScript");
  const at::Tensor x = at::randn({4, 9});
  EXPECT_TRUE(at::allclose(source->RunEager({x}).toTensor(), Gelu(x), 1e-5, 1e-6));
  ModelSource moved = source->To(at::Device(at::kCPU));
  EXPECT_TRUE(at::allclose(moved.RunEager({x}).toTensor(), Gelu(x), 1e-5, 1e-6));
}

}  // namespace
}  // namespace torchfuse::frontend
