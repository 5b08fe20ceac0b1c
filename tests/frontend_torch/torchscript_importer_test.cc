#include "frontend_torch/torchscript_importer.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/jit.h>

#include <cstring>
#include <tuple>

#include "absl/strings/str_cat.h"

#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "test_models.h"

namespace torchfuse::frontend {
namespace {

// An exception with no message of its own (the C++ side of a Python error): the message
// takes the interpreter's error text from the failure hook.
struct Silent : std::exception {
  const char* what() const noexcept override { return ""; }
};

TEST(OpFailureTest, MessagesTakeTheInterpretersErrorWhereTheExceptionHasNone) {
  SetOpFailureHook([] { return std::string("ValueError: cannot take item() of a fake tensor"); });
  EXPECT_EQ(OpFailed(), "ValueError: cannot take item() of a fake tensor");
  EXPECT_EQ(ExceptionText(Silent(), OpFailed()), "ValueError: cannot take item() of a fake tensor");
  EXPECT_EQ(ExceptionText(std::runtime_error("shape mismatch"), OpFailed()), "shape mismatch");
  EXPECT_EQ(ExceptionText(std::runtime_error(std::string(500, 'x')), "", 300).size(), 300u);
  SetOpFailureHook({});
  EXPECT_EQ(OpFailed(), "");
  EXPECT_NE(ExceptionText(Silent(), OpFailed()).find("with no message"), std::string::npos);
}

using graph::DType;
using graph::OpKind;
using graph::TensorType;
using testing::ModelPath;

int Count(const graph::Graph& g, OpKind kind) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->kind() == kind;
  return n;
}

bool AllElementwiseOrSource(const graph::Graph& g) {
  for (const auto& node : g.nodes()) {
    if (!graph::IsElementwise(node->kind()) &&
        graph::OpCategoryOf(node->kind()) != graph::OpCategory::kSource) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<ImportedModel> ImportIR(const std::string& ir, std::vector<TensorType> inputs) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return ImportTorchScriptGraph(*g, inputs);
}

class TorchScriptImporterTest : public ::testing::Test {
 protected:
  const std::vector<TensorType> kX = {{DType::kF32, {8, 1024}}};
};

TEST_F(TorchScriptImporterTest, ImportsScriptedAndTracedGeluAsElementwiseOps) {
  for (const char* file : {"gelu_scripted.pt", "gelu_traced.pt"}) {
    auto m = ImportModuleFile(ModelPath(file), kX);
    ASSERT_TRUE(m.ok()) << file << ": " << m.status();
    EXPECT_TRUE(graph::VerifyGraph(*m->graph).ok()) << graph::PrintGraph(*m->graph);
    EXPECT_TRUE(AllElementwiseOrSource(*m->graph)) << graph::PrintGraph(*m->graph);
    EXPECT_EQ(Count(*m->graph, OpKind::kTanh), 1) << file;
    EXPECT_EQ(Count(*m->graph, OpKind::kPow), 1) << file;
    EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[8,1024]");
  }
}

TEST_F(TorchScriptImporterTest, InlinesHelperFunctionCalls) {
  auto m = ImportModuleFile(ModelPath("gelu_helper_scripted.pt"), kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(AllElementwiseOrSource(*m->graph)) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(Count(*m->graph, OpKind::kTanh), 1);
}

TEST_F(TorchScriptImporterTest, CapturesParametersOfLinearLayers) {
  auto m = ImportModuleFile(ModelPath("mlp_traced.pt"), {{DType::kF32, {8, 256}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kLinear), 4) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(Count(*m->graph, OpKind::kParam), 8);
  for (const auto& n : m->graph->nodes()) {
    if (n->kind() == OpKind::kParam) {
      ASSERT_NE(n->data(), nullptr);
      EXPECT_EQ(n->data()->type, n->output()->type());
      // The module's tensor itself is held; its values are not copied.
      EXPECT_NE(n->data()->held, nullptr);
      EXPECT_TRUE(n->data()->bytes.empty());
    }
  }
}

TEST_F(TorchScriptImporterTest, TensorsKnownAtImportAreUsedWhereTheyAreUnlessALayoutNeedsACopy) {
  const at::Tensor w = at::randn({16, 32});
  auto data = CaptureTensor(w);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->type.ToString(), "f32[16,32]");
  // Contiguous on the device asked for: the same memory, so an update in place is seen.
  at::Tensor same = TensorFromData(**data, at::kCPU);
  EXPECT_EQ(same.data_ptr(), w.data_ptr());
  // A transposed view: a contiguous copy of the same values.
  auto t = CaptureTensor(w.t());
  ASSERT_TRUE(t.ok());
  at::Tensor copy = TensorFromData(**t, at::kCPU);
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_NE(copy.data_ptr(), w.data_ptr());
  EXPECT_TRUE(at::equal(copy, w.t()));
  // Bytes (a graph built without LibTorch's tensors) still make a tensor of their values.
  graph::TensorData bytes;
  bytes.type = (*data)->type;
  bytes.bytes.resize(16 * 32 * 4);
  std::memcpy(bytes.bytes.data(), w.data_ptr(), bytes.bytes.size());
  EXPECT_TRUE(at::equal(TensorFromData(bytes, at::kCPU), w));
}

TEST_F(TorchScriptImporterTest, MapsMaxValuesToAmaxAndSoftmaxOps) {
  auto m = ImportModuleFile(ModelPath("softmax_scripted.pt"), kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kAmax), 1) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(Count(*m->graph, OpKind::kSum), 1);
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 0);
  auto t = ImportModuleFile(ModelPath("torch_softmax_traced.pt"), kX);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Count(*t->graph, OpKind::kSoftmax), 1);
  auto ln = ImportModuleFile(ModelPath("f_layer_norm_scripted.pt"), kX);
  ASSERT_TRUE(ln.ok()) << ln.status();
  EXPECT_EQ(Count(*ln->graph, OpKind::kLayerNorm), 1);
}

TEST_F(TorchScriptImporterTest, ChunkSplitSliceAndSelectBecomeSlices) {
  // Python's slice bounds: negative and past-the-end ones are clamped.
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %c2 : int = prim::Constant[value=2]()
      %m1 : int = prim::Constant[value=-1]()
      %c0 : int = prim::Constant[value=0]()
      %c1 : int = prim::Constant[value=1]()
      %big : int = prim::Constant[value=100]()
      %m2 : int = prim::Constant[value=-2]()
      %parts : Tensor[] = aten::chunk(%x, %c2, %m1)
      %a : Tensor, %b : Tensor = prim::ListUnpack(%parts)
      %s : Tensor = aten::slice(%a, %c1, %m2, %big, %c1)
      %row : Tensor = aten::select(%x, %c0, %m1)
      %halves : Tensor[] = aten::split(%row, %c2, %c0)
      %h0 : Tensor = aten::__getitem__(%halves, %c1)
      %y : Tensor = aten::mul(%s, %h0)
      %z : (Tensor, Tensor) = prim::TupleConstruct(%y, %b)
      return (%z))IR",
                    {{DType::kF32, {4, 6}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 0) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(m->graph->outputs()[0]->type(), (TensorType{DType::kF32, {4, 2}}));
  EXPECT_EQ(m->graph->outputs()[1]->type(), (TensorType{DType::kF32, {4, 3}}));
  at::Tensor x = at::randn({4, 6});
  auto out = RunReference(*m, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<at::Tensor> halves = x.chunk(2, -1);
  at::Tensor want = halves[0].slice(1, 1, 3) * x.select(0, -1).split(2, 0)[1];
  EXPECT_TRUE(at::allclose((*out)[0], want));
  EXPECT_TRUE(at::equal((*out)[1], halves[1]));
}

TEST_F(TorchScriptImporterTest, CatAndStackBecomeCatNodesAndEmptyOperandsDrop) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor, %h : Tensor):
      %c0 : int = prim::Constant[value=0]()
      %m1 : int = prim::Constant[value=-1]()
      %c1 : int = prim::Constant[value=1]()
      %neg : Tensor = aten::neg(%x)
      %l : Tensor[] = prim::ListConstruct(%neg, %x, %h)
      %c : Tensor = aten::cat(%l, %m1)
      %s : Tensor[] = prim::ListConstruct(%x, %neg)
      %st : Tensor = aten::stack(%s, %c0)
      %z : Tensor = aten::slice(%x, %m1, %c0, %c0, %c1)
      %one : Tensor[] = prim::ListConstruct(%z, %x)
      %k : Tensor = aten::cat(%one, %m1)
      %r : (Tensor, Tensor, Tensor) = prim::TupleConstruct(%c, %st, %k)
      return (%r))IR",
                    {{DType::kF32, {4, 6}}, {DType::kBF16, {4, 2}}});
  ASSERT_TRUE(m.ok()) << m.status();
  const graph::Graph& g = *m->graph;
  EXPECT_EQ(Count(g, OpKind::kOpaque), 0) << graph::PrintGraph(g);
  EXPECT_EQ(Count(g, OpKind::kCat), 2) << graph::PrintGraph(g);  // the empty slice dropped
  EXPECT_EQ(g.outputs()[0]->type(), (TensorType{DType::kF32, {4, 14}}));  // bf16 promoted
  EXPECT_EQ(g.outputs()[1]->type(), (TensorType{DType::kF32, {2, 4, 6}}));
  EXPECT_EQ(g.outputs()[2]->type(), (TensorType{DType::kF32, {4, 6}}));
  at::Tensor x = at::randn({4, 6});
  at::Tensor h = at::randn({4, 2}).to(at::kBFloat16);
  auto out = RunReference(*m, {x, h});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::equal((*out)[0], at::cat({-x, x, h.to(at::kFloat)}, -1)));
  EXPECT_TRUE(at::equal((*out)[1], at::stack({x, -x}, 0)));
  EXPECT_TRUE(at::equal((*out)[2], x));
}

TEST_F(TorchScriptImporterTest, RollsAreSlicesAndACatPerRolledDim) {
  for (const char* file : {"window_shift_scripted.pt", "window_shift_traced.pt"}) {
    SCOPED_TRACE(file);
    auto m = ImportModuleFile(ModelPath(file), {{DType::kF32, {2, 8, 12, 16}}});
    ASSERT_TRUE(m.ok()) << m.status();
    const graph::Graph& g = *m->graph;
    // Two dims rolled twice, one dim twice, a roll by 0 (a copy); the flattened roll stays
    // torch's.
    EXPECT_EQ(Count(g, OpKind::kCat), 6) << graph::PrintGraph(g);
    EXPECT_EQ(Count(g, OpKind::kOpaque), 1) << graph::PrintGraph(g);
    auto module = LoadModule(ModelPath(file));
    ASSERT_TRUE(module.ok());
    at::Tensor x = at::randn({2, 8, 12, 16});
    auto out = RunReference(*m, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    auto want = module->forward({x}).toTuple()->elements();
    ASSERT_EQ(out->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(at::allclose((*out)[i], want[i].toTensor())) << "output " << i;
    }
  }
}

TEST_F(TorchScriptImporterTest, FoldsTracedSizeArithmeticOnScalarTensors) {
  // torch.jit.trace writes `x.size(-1) // 2` as NumToTensor, floor_divide and Int.
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %m1 : int = prim::Constant[value=-1]()
      %two : int = prim::Constant[value=2]()
      %c0 : int = prim::Constant[value=0]()
      %c1 : int = prim::Constant[value=1]()
      %n : int = aten::size(%x, %m1)
      %t : Tensor = prim::NumToTensor(%n)
      %d : Tensor = aten::floor_divide(%t, %two)
      %i : int = aten::Int(%d)
      %y : Tensor = aten::slice(%x, %m1, %c0, %i, %c1)
      return (%y))IR",
                    kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[8,512]");
}

TEST_F(TorchScriptImporterTest, KeepsUnsupportedOpsOpaque) {
  auto m = ImportModuleFile(ModelPath("mixed_scripted.pt"), kX);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(Count(*m->graph, OpKind::kOpaque), 1) << graph::PrintGraph(*m->graph);
  for (const auto& n : m->graph->nodes()) {
    if (n->kind() == OpKind::kOpaque) {
      EXPECT_EQ(n->StringAttr("target"), "aten::cumsum");
    }
  }
  EXPECT_EQ(m->opaque.size(), 1u);
  EXPECT_EQ(Count(*m->graph, OpKind::kVar), 2);
  EXPECT_EQ(Count(*m->graph, OpKind::kWhere), 1);
}

// index_put with accumulate by one index tensor is marked for the scatter-add kernel (its
// operands: self, the indices, the values); one without accumulate is not.
TEST_F(TorchScriptImporterTest, MarksIndexPutsWithAccumulateForTheScatterAdd) {
  for (const char* file : {"index_put_accumulate_scripted.pt", "index_put_accumulate_traced.pt"}) {
    auto m = ImportModuleFile(ModelPath(file), {{DType::kI64, {4, 16}},
                                                {DType::kF32, {4, 16, 100}},
                                                {DType::kF32, {1000, 100}}});
    ASSERT_TRUE(m.ok()) << file << ": " << m.status();
    int marked = 0, plain = 0;
    for (const auto& n : m->graph->nodes()) {
      if (n->kind() != OpKind::kOpaque || n->StringAttr("target") != "aten::index_put") continue;
      if (n->HasAttr("scatter_add")) {
        ++marked;
        ASSERT_EQ(n->inputs().size(), 3u);
        EXPECT_EQ(n->input(1)->type().dtype, DType::kI64);
        EXPECT_EQ(n->input(2)->type().sizes, (std::vector<int64_t>{4, 16, 100}));
      } else {
        ++plain;
      }
    }
    EXPECT_EQ(marked, 2) << file << "\n" << graph::PrintGraph(*m->graph);
    EXPECT_EQ(plain, 1) << file;
  }
}

// `table[indices]` by one index tensor is marked for the gather kernel (operands: the table,
// the indices); a tensor indexed by two index tensors is not.
TEST_F(TorchScriptImporterTest, MarksTensorsIndexedByOneIndexTensorForTheGather) {
  for (const char* file : {"index_rows_scripted.pt", "index_rows_traced.pt"}) {
    auto m = ImportModuleFile(ModelPath(file), {{DType::kI64, {4, 16}},
                                                {DType::kF32, {64, 6, 5}},
                                                {DType::kF32, {2, 3, 49, 49}},
                                                {DType::kF32, {169, 3}}});
    ASSERT_TRUE(m.ok()) << file << ": " << m.status();
    std::vector<std::vector<int64_t>> marked;
    int plain = 0;
    for (const auto& n : m->graph->nodes()) {
      if (n->kind() != OpKind::kOpaque || n->StringAttr("target") != "aten::index") continue;
      if (n->HasAttr("index_rows")) {
        ASSERT_EQ(n->inputs().size(), 2u);
        EXPECT_EQ(n->input(1)->type().dtype, DType::kI64);
        marked.push_back(n->output()->type().sizes);
      } else {
        ++plain;
      }
    }
    // The bias table's rows at the 49 x 49 positions, and the table's at the ids.
    EXPECT_EQ(marked, (std::vector<std::vector<int64_t>>{{2401, 3}, {4, 16, 6, 5}}))
        << file << "\n" << graph::PrintGraph(*m->graph);
    EXPECT_EQ(plain, 1) << file;
  }
}

// Indexing by buffers: a mask's rows are counted from its values at import (five of eight) and
// it stays the op's own argument; row indices become a captured operand of a lookup marked for
// the gather kernel.
TEST_F(TorchScriptImporterTest, IndexesByBuffersWithTheSizesTheirValuesGive) {
  for (const char* file : {"constant_index_rows_scripted.pt", "constant_index_rows_traced.pt"}) {
    auto m = ImportModuleFile(ModelPath(file), {{DType::kF32, {8, 4}}});
    ASSERT_TRUE(m.ok()) << file << ": " << m.status();
    std::vector<std::vector<int64_t>> masked, rows;
    for (const auto& n : m->graph->nodes()) {
      if (n->kind() != OpKind::kOpaque || n->StringAttr("target") != "aten::index") continue;
      if (n->HasAttr("index_rows")) {
        ASSERT_EQ(n->inputs().size(), 2u);
        EXPECT_EQ(n->input(1)->producer()->kind(), OpKind::kParam);
        rows.push_back(n->output()->type().sizes);
      } else {
        EXPECT_EQ(n->inputs().size(), 1u);
        masked.push_back(n->output()->type().sizes);
      }
    }
    const std::vector<std::vector<int64_t>> five = {{5, 4}}, four = {{4, 4}};
    EXPECT_EQ(masked, five) << file << "\n" << graph::PrintGraph(*m->graph);
    EXPECT_EQ(rows, four) << file;
  }
}

// x[mask] by an argument's mask, nonzero, unique, bincount and masked_select: their results'
// sizes depend on tensor values, so no type holds for them; the import says so, naming the
// node, rather than typing them from a run on tensors of ones.
TEST_F(TorchScriptImporterTest, RefusesResultsWhoseSizesDependOnTensorValues) {
  const std::vector<graph::TensorType> x = {{DType::kF32, {8, 4}}};
  const std::vector<graph::TensorType> x_and_mask = {{DType::kF32, {8, 4}}, {DType::kBool, {8}}};
  const std::vector<std::tuple<const char*, std::vector<graph::TensorType>, const char*>> cases = {
      {"masked_rows_scripted.pt", x_and_mask, "aten::index"},
      {"masked_rows_traced.pt", x_and_mask, "aten::index"},
      {"nonzero_scripted.pt", x, "aten::nonzero"},
      {"unique_scripted.pt", x, "unique"},
      {"bincount_scripted.pt", x, "aten::bincount"},
      {"masked_select_scripted.pt", x, "aten::masked_select"}};
  for (const auto& [file, inputs, op] : cases) {
    auto m = ImportModuleFile(ModelPath(file), inputs);
    ASSERT_FALSE(m.ok()) << file << "\n" << graph::PrintGraph(*m->graph);
    EXPECT_NE(m.status().message().find("sizes depend on tensor values"), std::string::npos)
        << m.status();
    EXPECT_NE(m.status().message().find(op), std::string::npos) << m.status();
  }
}

TEST_F(TorchScriptImporterTest, ReturnsTuples) {
  auto m = ImportModuleFile(ModelPath("two_outputs_scripted.pt"), kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->returns_tuple);
  EXPECT_EQ(m->graph->outputs().size(), 2u);
}

TEST_F(TorchScriptImporterTest, MissingFileNamesThePath) {
  auto m = ImportModuleFile("/nonexistent/model.pt", kX);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/model.pt"), std::string::npos);
}

TEST_F(TorchScriptImporterTest, GarbageFileNamesThePath) {
  auto m = ImportModuleFile(ModelPath("not_a_model.pt"), kX);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("not_a_model.pt"), std::string::npos);
  EXPECT_NE(m.status().message().find("not a TorchScript archive"), std::string::npos);
}

TEST_F(TorchScriptImporterTest, RejectsTensorDependentControlFlowNamingTheNode) {
  auto m = ImportModuleFile(ModelPath("branchy_scripted.pt"), kX);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("prim::If"), std::string::npos) << m.status();
}

TEST_F(TorchScriptImporterTest, RejectsWrongNumberOfInputs) {
  auto m = ImportModuleFile(ModelPath("gelu_traced.pt"), {kX[0], kX[0]});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("1 tensor inputs, 2 given"), std::string::npos)
      << m.status();
}

// PyTorch 1.13 traces scalars into aten ops as Python numbers.
TEST_F(TorchScriptImporterTest, ImportsIRWithScalarOperands) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %half : float = prim::Constant[value=0.5]()
      %one : int = prim::Constant[value=1]()
      %y : Tensor = aten::mul(%x, %half)
      %z : Tensor = aten::add(%y, %x, %one)
      %t : Tensor = aten::tanh(%z)
      return (%t))IR",
                    {{DType::kBF16, {4, 64}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(graph::PrintGraph(*m->graph),
            "graph(%0: bf16[4,64]) {\n"
            "  %1: f64[] = constant() {dtype=\"f64\", value=0.5, wrapped=1}\n"
            "  %2: bf16[4,64] = mul(%0, %1)\n"
            "  %3: bf16[4,64] = add(%2, %0)\n"
            "  %4: bf16[4,64] = tanh(%3)\n"
            "  return(%4)\n"
            "}\n");
}

// PyTorch 2.x traces scalars as 0-dim tensor constants; alpha != 1 becomes a multiply.
TEST_F(TorchScriptImporterTest, ImportsIRWithZeroDimTensorConstants) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %y : Tensor = aten::sub(%x, %x, %two)
      return (%y))IR",
                      g.get());
  // Insert a 0-dim f64 tensor constant the way the 2.x tracer records `x * 0.5`.
  torch::jit::WithInsertPoint guard(g->return_node());
  torch::jit::Value* c = g->insertConstant(at::scalar_tensor(0.5, at::kDouble));
  torch::jit::Node* mul = g->create(c10::Symbol::fromQualString("aten::mul"), {g->outputs()[0], c});
  g->insertNode(mul);
  g->return_node()->replaceInput(0, mul->output());
  auto m = ImportTorchScriptGraph(*g, {{DType::kF32, {4, 8}}});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string text = graph::PrintGraph(*m->graph);
  EXPECT_NE(text.find("constant() {dtype=\"f64\", value=0.5}"), std::string::npos) << text;
  EXPECT_NE(text.find("= mul("), std::string::npos) << text;
  EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[4,8]");
  at::Tensor x = at::randn({4, 8});
  auto out = RunReference(*m, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::allclose((*out)[0], (x - 2 * x) * 0.5));
}

TEST_F(TorchScriptImporterTest, UnsupportedDtypeNamesOpAndDtype) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %dt : int = prim::Constant[value=0]()
      %f : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %y : Tensor = aten::to(%x, %dt, %f, %f, %none)
      return (%y))IR",
                    kX);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("aten::to"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("Byte"), std::string::npos) << m.status();
}

TEST_F(TorchScriptImporterTest, EvaluatesSizeArithmeticAtImport) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %m1 : int = prim::Constant[value=-1]()
      %two : int = prim::Constant[value=2]()
      %n : int = aten::size(%x, %m1)
      %h : int = aten::floordiv(%n, %two)
      %shape : int[] = prim::ListConstruct(%m1, %h)
      %y : Tensor = aten::view(%x, %shape)
      return (%y))IR",
                    kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[16,512]");
  EXPECT_EQ(Count(*m->graph, OpKind::kReshape), 1);
}

TEST_F(TorchScriptImporterTest, MaxWithUsedIndicesStaysOpaque) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %d : int = prim::Constant[value=-1]()
      %k : bool = prim::Constant[value=1]()
      %v : Tensor, %i : Tensor = aten::max(%x, %d, %k)
      %r : (Tensor, Tensor) = prim::TupleConstruct(%v, %i)
      return (%r))IR",
                    kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 1);
  EXPECT_EQ(m->graph->outputs()[1]->type().ToString(), "i64[8,1]");
}

// An op whose results mix tensors and a scalar (as fused attention's do: out, logsumexp, ...,
// max_q, max_k): its tensors flow on to fused ops, its scalar is refused only where used.
const char* kBatchNormImplIndex = R"IR(
    graph(%x : Tensor, %w : Tensor, %b : Tensor, %rm : Tensor, %rv : Tensor):
      %train : bool = prim::Constant[value=0]()
      %momentum : float = prim::Constant[value=0.1]()
      %eps : float = prim::Constant[value=1.0000000000000001e-05]()
      %cudnn : bool = prim::Constant[value=1]()
      %y : Tensor, %s1 : Tensor, %s2 : Tensor, %r : Tensor, %idx : int = aten::_batch_norm_impl_index(%x, %w, %b, %rm, %rv, %train, %momentum, %eps, %cudnn)
      %g : Tensor = aten::sigmoid(%y)
      %out : Tensor = aten::mul(%g, %y)
      %use : Tensor = aten::add(%out, %idx, %idx)
      %ws : Tensor = aten::neg(%r)
      return (RESULT))IR";

TEST_F(TorchScriptImporterTest, AnOpWithAScalarResultStillPassesOnItsTensors) {
  const std::vector<TensorType> types = {{DType::kF32, {8, 16, 32}}, {DType::kF32, {16}},
                                         {DType::kF32, {16}}, {DType::kF32, {16}},
                                         {DType::kF32, {16}}};
  const std::string ir = kBatchNormImplIndex;
  const size_t at = ir.find("RESULT");
  auto m = ImportIR(std::string(ir).replace(at, 6, "%out"), types);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 1) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(Count(*m->graph, OpKind::kSigmoid), 1) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[8,16,32]");
  // The graph run op by op gives the module's answer.
  std::vector<at::Tensor> in = {at::randn({8, 16, 32}), at::rand({16}) + 0.5, at::randn({16}),
                                at::randn({16}), at::rand({16}) + 0.5};
  ReferenceExecutor exec(&m->opaque);
  auto got = exec.Run(*m->graph, in);
  ASSERT_TRUE(got.ok()) << got.status();
  const at::Tensor y = at::batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5, true);
  EXPECT_TRUE(at::allclose((*got)[0], at::sigmoid(y) * y, 1e-5, 1e-6));
  // Where the scalar is used, the error names the op that made it.
  auto used = ImportIR(std::string(ir).replace(at, 6, "%use"), types);
  ASSERT_FALSE(used.ok());
  EXPECT_NE(used.status().message().find("computed from tensor data"), std::string::npos)
      << used.status();
  EXPECT_NE(used.status().message().find("_batch_norm_impl_index"), std::string::npos)
      << used.status();
  // Its byte workspace, a tensor of a dtype the IR has not: refused where used, saying why.
  auto workspace = ImportIR(std::string(ir).replace(at, 6, "%ws"), types);
  ASSERT_FALSE(workspace.ok());
  EXPECT_NE(workspace.status().message().find("cannot hold (unsupported dtype"), std::string::npos)
      << workspace.status();
}

// In-place ops on a fresh value (made by an op that returns new memory) that nothing else
// aliases become functional: the reads after the write see its result, the reads before the
// old value (`y = x * 2; z = y.exp(); y.add_(1); y.relu_()`), and the ops fuse. Writes into
// the graph's argument, through a view, or into a value a list holds are refused, naming the
// node. Before, an in-place op whose result went unused was dropped as dead code and the reads
// of y saw the old values: a wrong answer, silently.
TEST_F(TorchScriptImporterTest, InPlaceOpsBecomeFunctionalOrAreRefused) {
  const std::string fresh = R"IR(
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %y : Tensor = aten::mul(%x, %two)
      %z : Tensor = aten::exp(%y)
      %a : Tensor = aten::add_(%y, %one, %one)
      %b : Tensor = aten::relu_(%y)
      %r : Tensor = aten::add(%z, %y, %one)
      return (%r))IR";
  auto m = ImportIR(fresh, kX);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 0) << graph::PrintGraph(*m->graph);
  EXPECT_TRUE(AllElementwiseOrSource(*m->graph)) << graph::PrintGraph(*m->graph);
  const at::Tensor x = at::randn({8, 1024});
  ReferenceExecutor exec(&m->opaque);
  auto got = exec.Run(*m->graph, {x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::allclose((*got)[0], at::exp(x * 2) + at::relu(x * 2 + 1), 1e-5, 1e-6));

  // Through a slice (`y[:, 1:3] *= 0.5`): the product of the view, scattered back into y,
  // which fuses (a cat of y's slices and the product).
  const std::string through_slice = R"IR(
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %half : float = prim::Constant[value=0.5]()
      %y : Tensor = aten::mul(%x, %two)
      %v : Tensor = aten::slice(%y, %one, %one, %three, %one)
      %w : Tensor = aten::mul_(%v, %half)
      %e : Tensor = aten::exp(%y)
      return (%e))IR";
  auto sliced = ImportIR(through_slice, kX);
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  EXPECT_EQ(Count(*sliced->graph, OpKind::kOpaque), 0) << graph::PrintGraph(*sliced->graph);
  auto got_sliced = ReferenceExecutor(&sliced->opaque).Run(*sliced->graph, {x});
  ASSERT_TRUE(got_sliced.ok()) << got_sliced.status();
  at::Tensor want_sliced = x * 2;
  want_sliced.slice(1, 1, 3).mul_(0.5);
  EXPECT_TRUE(at::allclose((*got_sliced)[0], want_sliced.exp(), 1e-5, 1e-6));

  struct Refused {
    const char* ir;
    const char* node;
  } refused[] = {
      // The argument itself: eager changes the caller's tensor.
      {R"IR(
        graph(%x : Tensor):
          %one : int = prim::Constant[value=1]()
          %a : Tensor = aten::add_(%x, %one, %one)
          %e : Tensor = aten::exp(%x)
          return (%e))IR",
       "aten::add_"},
      // Through a view that is read after the write (`v = y[:, 1:3]; v *= 0.5; v + y`).
      {R"IR(
        graph(%x : Tensor):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %three : int = prim::Constant[value=3]()
          %half : float = prim::Constant[value=0.5]()
          %none : NoneType = prim::Constant()
          %y : Tensor = aten::mul(%x, %two)
          %v : Tensor = aten::slice(%y, %one, %one, %three, %one)
          %w : Tensor = aten::mul_(%v, %half)
          %e : Tensor = aten::exp(%y)
          %s : Tensor = aten::sum(%v, %none)
          %r : Tensor = aten::add(%e, %s, %one)
          return (%r))IR",
       "aten::mul_"},
      // Through a view that is not a select or a slice (`y.t().add_(1)`).
      {R"IR(
        graph(%x : Tensor):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %y : Tensor = aten::mul(%x, %two)
          %t : Tensor = aten::t(%y)
          %w : Tensor = aten::add_(%t, %one, %one)
          %e : Tensor = aten::exp(%y)
          return (%e))IR",
       "aten::add_"},
      // Into the base of a view taken before: the view's reads see the write.
      {R"IR(
        graph(%x : Tensor):
          %zero : int = prim::Constant[value=0]()
          %two : int = prim::Constant[value=2]()
          %y : Tensor = aten::mul(%x, %two)
          %t : Tensor = aten::t(%y)
          %w : Tensor = aten::relu_(%y)
          %e : Tensor = aten::exp(%t)
          return (%e))IR",
       "aten::relu_"},
      // Into a value a list holds, read after the write.
      {R"IR(
        graph(%x : Tensor):
          %zero : int = prim::Constant[value=0]()
          %two : int = prim::Constant[value=2]()
          %y : Tensor = aten::mul(%x, %two)
          %l : Tensor[] = prim::ListConstruct(%y, %x)
          %w : Tensor = aten::relu_(%y)
          %c : Tensor = aten::cat(%l, %zero)
          return (%c))IR",
       "aten::relu_"},
  };
  for (const Refused& r : refused) {
    auto bad = ImportIR(r.ir, kX);
    ASSERT_FALSE(bad.ok()) << r.ir;
    EXPECT_NE(bad.status().message().find(r.node), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("in place"), std::string::npos) << bad.status();
  }
}

// Scripted programs that write in place, each either imported so that the reference executor
// computes what TorchScript's own run of the program computes, or refused by name. Views
// taken before a write and read after it, writes through views, chains of writes with reads
// between them, writes into a value the program returns.
TEST_F(TorchScriptImporterTest, ScriptedInPlaceProgramsMatchTheirOwnRunOrAreRefused) {
  struct Program {
    const char* name;
    bool imports;  // else refused, naming the write
    const char* source;
  } programs[] = {
      {"view before the write", false, R"PY(
def f(x):
    y = x * 2
    v = y.view(-1)
    y.add_(1)
    return v.exp()
)PY"},
      {"write through a select", true, R"PY(
def f(x):
    y = x * 2
    y[0].mul_(3)
    return y + 1
)PY"},
      {"chained writes, reads between", true, R"PY(
def f(x):
    y = x + 1
    a = y.sum(-1, keepdim=True)
    y.mul_(2).sub_(a)
    b = y * y
    y.clamp_(min=0.0)
    return a + b + y
)PY"},
      {"write through a transpose", false, R"PY(
def f(x):
    y = x * 3
    t = y.t()
    t.add_(1)
    return y.sin()
)PY"},
      {"returned value written after a read", true, R"PY(
def f(x):
    y = x.relu()
    z = y * 2
    y.add_(5)
    return y, z
)PY"},
      {"masked_fill_ and a column set", true, R"PY(
def f(x):
    y = x.clone()
    y.masked_fill_(x > 0.5, 0.0)
    y[:, 1] = 7.0
    return y * 2
)PY"},
      {"slice set and +=", true, R"PY(
def f(x):
    y = torch.zeros_like(x)
    y[:, :2] = x[:, :2] * 3
    y += x
    return y.tanh()
)PY"},
      {"write into a chunk", false, R"PY(
def f(x):
    y = x * 1.5
    a, b = y.chunk(2, dim=-1)
    a.relu_()
    return y * 2 + b.sum()
)PY"},
      {"the result of the write and its base", true, R"PY(
def f(x):
    y = x - 0.25
    z = y.mul_(4)
    w = y.exp_()
    return z + w + y
)PY"},
      {"write inside a branch", false, R"PY(
def f(x):
    y = x * 2
    if bool(x.sum() > 0):
        y.add_(1)
    return y.exp()
)PY"},
      {"write inside a loop (unrolled)", true, R"PY(
def f(x):
    y = x * 0.5
    for _ in range(3):
        y.mul_(1.5)
    return y + x
)PY"},
      {"the argument, read before", false, R"PY(
def f(x):
    a = x.exp()
    x.add_(1)
    return a + x
)PY"},
      {"a list of fresh values, then one written", true, R"PY(
def f(x):
    y = x * 2
    z = x + 1
    l = [y, z]
    z.relu_()
    return torch.cat(l, 0)
)PY"},
      {"a view read only before the write", true, R"PY(
def f(x):
    w = x + 0.5
    w[0] = w[-1] * 2.0
    w[..., 1:] += 1.0
    return w
)PY"},
      {"a view the write reads", false, R"PY(
def f(x):
    y = x * 2
    y[0].add_(y[1])
    return y
)PY"},
      {"chunks of the value after the writes", true, R"PY(
def f(x):
    y = x - 0.25
    y.mul_(2.0).sub_(y.sum(-1, keepdim=True))
    a, b = y.chunk(2, -1)
    return torch.cat([b, a], -1) * 1.5 + y
)PY"},
      {"type_as of the same dtype returns the argument", false, R"PY(
def f(x):
    y = x.type_as(x)
    y.add_(1)
    return y * 2
)PY"},
      {"writes through views, a chain, chunks of both values after", true, R"PY(
def f(x0):
    v0 = x0 / (torch.abs(x0) + 1.0)
    v1 = v0 + 0.5
    v1[0] = v1[-1] * 2.0
    v2 = x0 - 0.25
    v2.mul_(2.0).sub_(v2.sum(-1, keepdim=True))
    v3 = v2 / (torch.abs(v0) + 1.0)
    v4 = v2 * 0.5
    v4[..., :1] += 1.0
    v4[1:].relu_()
    v5 = torch.cat(v1.chunk(2, -1), -1) * 1.5
    v6 = torch.cat(v2.chunk(2, -1), -1) * 1.5
    s = v6 + x0
    out = torch.layer_norm(v6, [6]) + torch.layer_norm(s.reshape(-1, 6), [6]).reshape(s.shape)
    return out, v4, v5, v3
)PY"},
      {"copy_ into a fresh value", true, R"PY(
def f(x):
    y = torch.empty_like(x)
    y.copy_(x * 3)
    return y - 1
)PY"},
  };
  for (const Program& p : programs) {
    SCOPED_TRACE(p.name);
    auto cu = torch::jit::compile(p.source);
    torch::jit::Function& fn = cu->get_function("f");
    const std::shared_ptr<torch::jit::Graph> g = torch::jit::toGraphFunction(fn).graph()->copy();
    auto m = ImportTorchScriptGraph(*g, {{DType::kF32, {4, 6}}});
    at::manual_seed(7);
    const at::Tensor x = at::randn({4, 6});
    if (!p.imports) {
      ASSERT_FALSE(m.ok());
      EXPECT_NE(m.status().message().find("in place"), std::string::npos) << m.status();
      continue;
    }
    ASSERT_TRUE(m.ok()) << m.status();
    const c10::IValue want = fn({x.clone()});
    ReferenceExecutor exec(&m->opaque);
    auto got = exec.Run(*m->graph, {x.clone()});
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << graph::PrintGraph(*m->graph);
    std::vector<at::Tensor> wants;
    if (want.isTensor()) {
      wants.push_back(want.toTensor());
    } else {
      for (const c10::IValue& v : want.toTuple()->elements()) wants.push_back(v.toTensor());
    }
    ASSERT_EQ(got->size(), wants.size());
    for (size_t i = 0; i < wants.size(); ++i) {
      EXPECT_TRUE(at::allclose((*got)[i], wants[i], 1e-5, 1e-6))
          << "output " << i << "\n" << graph::PrintGraph(*m->graph) << "\ngot\n"
          << (*got)[i] << "\nwant\n" << wants[i];
    }
  }
}

// Loops of a constant trip count unroll at import (nested too) and their ops fuse; a loop
// whose unrolled body would pass the size limit, or whose trip count is not a constant (a
// size), is refused, naming it.
TEST_F(TorchScriptImporterTest, ConstantLoopsUnrollWithinALimit) {
  auto cu = torch::jit::compile(R"PY(
def small(x):
    y = x * 0.5
    for i in range(3):
        for j in range(2):
            y = y * 1.25 + float(i - j)
    return y.tanh()

def long(x):
    y = x
    for i in range(100000):
        y = y * 0.999
    return y

def sized(x):
    y = x
    for i in range(x.size(0)):
        y = y + 1.0
    return y
)PY");
  const std::vector<TensorType> types = {{DType::kF32, {8, 1024}}};
  torch::jit::Function& small = cu->get_function("small");
  auto m = ImportTorchScriptGraph(*torch::jit::toGraphFunction(small).graph()->copy(), types);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(AllElementwiseOrSource(*m->graph)) << graph::PrintGraph(*m->graph);
  const at::Tensor x = at::randn({8, 1024});
  auto got = ReferenceExecutor(&m->opaque).Run(*m->graph, {x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::allclose((*got)[0], small({x}).toTensor(), 1e-5, 1e-6));
  // The bound is on what unrolling adds: a graph of thousands of nodes unrolls its small
  // loop (even inside a branch).
  std::string big = "def big(x, flag: bool):\n    y = x\n";
  for (int i = 0; i < 2200; ++i) {
    big += absl::StrCat("    y = y * ", 1.0 + (i % 7) * 1e-3, " - ", (i % 5) * 1e-3, "\n");
  }
  big += "    if flag:\n        for i in range(3):\n            y = y.sin() + float(i)\n";
  big += "    return y\n";
  auto big_cu = torch::jit::compile(big);
  torch::jit::Function& big_fn = big_cu->get_function("big");
  std::shared_ptr<torch::jit::Graph> big_graph = torch::jit::toGraphFunction(big_fn).graph()->copy();
  ASSERT_GT(std::distance(big_graph->nodes().begin(), big_graph->nodes().end()), 4096);
  // The flag becomes a constant, as a frozen module's attribute would.
  {
    torch::jit::WithInsertPoint at_start(*big_graph->nodes().begin());
    big_graph->inputs()[1]->replaceAllUsesWith(big_graph->insertConstant(true));
    big_graph->eraseInput(1);
  }
  auto bm = ImportTorchScriptGraph(*big_graph, types);
  ASSERT_TRUE(bm.ok()) << bm.status();
  auto big_got = ReferenceExecutor(&bm->opaque).Run(*bm->graph, {x});
  ASSERT_TRUE(big_got.ok()) << big_got.status();
  EXPECT_TRUE(at::allclose((*big_got)[0], big_fn({x, true}).toTensor(), 1e-4, 1e-5));
  // (A trip count of a size is not a constant when loops unroll, before sizes are bound.)
  for (const char* name : {"long", "sized"}) {
    torch::jit::Function& fn = cu->get_function(name);
    auto refused =
        ImportTorchScriptGraph(*torch::jit::toGraphFunction(fn).graph()->copy(), types);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_NE(refused.status().message().find("prim::Loop"), std::string::npos)
        << refused.status();
  }
}

// slice_scatter with step 1 and select_scatter (a write through a view, made functional, or
// a slice's gradient) import as base's slices and src joined by a cat, which fuses: negative
// and open bounds, a src that broadcasts, and one of another dtype, against ATen. Another
// step runs in torch.
TEST_F(TorchScriptImporterTest, SliceAndSelectScattersBecomeCatsOfSlices) {
  const std::string ir = R"IR(
    graph(%x : Tensor, %s : Tensor, %r : Tensor, %h : Tensor):
      %none : NoneType = prim::Constant()
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %m1 : int = prim::Constant[value=-1]()
      %m2 : int = prim::Constant[value=-2]()
      %a : Tensor = aten::slice_scatter(%x, %s, %one, %m2, %none, %one)
      %b : Tensor = aten::slice_scatter(%a, %r, %zero, %one, %two, %one)
      %c : Tensor = aten::select_scatter(%b, %h, %m1, %m1)
      %d : Tensor = aten::select_scatter(%c, %h, %one, %zero)
      %e : Tensor = aten::slice_scatter(%d, %d, %zero, %none, %none, %one)
      %f : Tensor = aten::mul(%e, %two)
      return (%f))IR";
  const std::vector<TensorType> types = {{DType::kF32, {5, 6}}, {DType::kF32, {5, 2}},
                                         {DType::kF32, {6}}, {DType::kF16, {5}}};
  auto m = ImportIR(ir, types);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 0) << graph::PrintGraph(*m->graph);
  EXPECT_GE(Count(*m->graph, OpKind::kCat), 4) << graph::PrintGraph(*m->graph);
  const at::Tensor x = at::randn({5, 6}), s = at::randn({5, 2}), r = at::randn({6});
  const at::Tensor h = at::randn({5}).to(at::kHalf);
  auto got = ReferenceExecutor(&m->opaque).Run(*m->graph, {x, s, r, h});
  ASSERT_TRUE(got.ok()) << got.status();
  at::Tensor want = x.clone();
  want.slice(1, -2).copy_(s);
  want.slice(0, 1, 2).copy_(r);
  want.select(-1, -1).copy_(h);
  want.select(1, 0).copy_(h);
  EXPECT_TRUE(at::allclose((*got)[0], want * 2, 1e-6, 1e-6)) << (*got)[0] << want * 2;

  // Every other column: torch's slice_scatter.
  const std::string strided = R"IR(
    graph(%x : Tensor, %s : Tensor):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %six : int = prim::Constant[value=6]()
      %a : Tensor = aten::slice_scatter(%x, %s, %one, %zero, %six, %two)
      %f : Tensor = aten::mul(%a, %two)
      return (%f))IR";
  auto m2 = ImportIR(strided, {{DType::kF32, {5, 6}}, {DType::kF32, {5, 3}}});
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(Count(*m2->graph, OpKind::kOpaque), 1) << graph::PrintGraph(*m2->graph);
  const at::Tensor s3 = at::randn({5, 3});
  auto got2 = ReferenceExecutor(&m2->opaque).Run(*m2->graph, {x, s3});
  ASSERT_TRUE(got2.ok()) << got2.status();
  EXPECT_TRUE(at::allclose((*got2)[0], at::slice_scatter(x, s3, 1, 0, 6, 2) * 2));
}

// A tensor of one value that the program makes at import (zeros, full, ones: folded by
// TorchScript's constant propagation), of 64 KB or more, imports as that value expanded, not
// as a captured tensor of its size; its consumers see the same values. A weight of one
// value (a norm's ones) stays a weight.
TEST_F(TorchScriptImporterTest, UniformFoldedTensorsAreExpandedConstants) {
  const std::string ir = R"IR(
    graph(%x : Tensor):
      %none : NoneType = prim::Constant()
      %f32 : int = prim::Constant[value=6]()
      %v : float = prim::Constant[value=2.5]()
      %s : int[] = prim::Constant[value=[64, 512]]()
      %z : Tensor = aten::zeros(%s, %f32, %none, %none, %none)
      %f : Tensor = aten::full(%s, %v, %f32, %none, %none, %none)
      %o : Tensor = aten::ones(%s, %f32, %none, %none, %none)
      %a : Tensor = aten::add(%x, %z, %v)
      %b : Tensor = aten::mul(%a, %f)
      %c : Tensor = aten::sub(%b, %o, %v)
      return (%c))IR";
  auto m = ImportIR(ir, {{DType::kF32, {64, 512}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kParam), 0) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(Count(*m->graph, OpKind::kExpand), 3) << graph::PrintGraph(*m->graph);
  const at::Tensor x = at::randn({64, 512});
  auto got = ReferenceExecutor(&m->opaque).Run(*m->graph, {x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(at::allclose((*got)[0], (x * 2.5) - 2.5, 1e-6, 1e-6));

  // A weight of ones, as large: captured, so that writes into it (an optimizer's) are seen.
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::Value* in = g->addInput("x");
  const at::Tensor ones = at::ones({64, 512});
  torch::jit::Value* w = g->insertConstant(ones);
  g->registerOutput(g->insert(c10::Symbol::fromQualString("aten::mul"), {in, w}));
  auto weighted = ImportTorchScriptGraph(*g, {{DType::kF32, {64, 512}}});
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  EXPECT_EQ(Count(*weighted->graph, OpKind::kParam), 1) << graph::PrintGraph(*weighted->graph);
}

// scatter with an index one wide along its dim and as large as self elsewhere (a loss's
// gradient) imports as where(positions == index, value, self), which fuses: along the last
// and a middle dim, a value and a src, f32 and bf16, against ATen's scatter. An index wider
// than one, smaller than self, or a reduction runs in torch.
TEST_F(TorchScriptImporterTest, OneHotScattersBecomeWheres) {
  const std::string ir = R"IR(
    graph(%x : Tensor, %i : Tensor, %j : Tensor, %s : Tensor):
      %one : int = prim::Constant[value=1]()
      %m1 : int = prim::Constant[value=-1]()
      %v : float = prim::Constant[value=-1.5]()
      %a : Tensor = aten::scatter(%x, %m1, %i, %v)
      %b : Tensor = aten::scatter(%a, %one, %j, %s)
      %c : Tensor = aten::mul(%b, %v)
      return (%c))IR";
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const at::ScalarType st = dt == DType::kF32 ? at::kFloat : at::kBFloat16;
    const std::vector<TensorType> types = {{dt, {3, 5, 7}}, {DType::kI64, {3, 5, 1}},
                                           {DType::kI64, {3, 1, 7}}, {dt, {3, 1, 7}}};
    auto m = ImportIR(ir, types);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 0) << graph::PrintGraph(*m->graph);
    EXPECT_EQ(Count(*m->graph, OpKind::kWhere), 2) << graph::PrintGraph(*m->graph);
    const at::Tensor x = at::randn({3, 5, 7}).to(st);
    const at::Tensor i = at::randint(0, 7, {3, 5, 1}, at::kLong);
    const at::Tensor j = at::randint(0, 5, {3, 1, 7}, at::kLong);
    const at::Tensor s = at::randn({3, 1, 7}).to(st);
    auto got = ReferenceExecutor(&m->opaque).Run(*m->graph, {x, i, j, s});
    ASSERT_TRUE(got.ok()) << got.status();
    const at::Tensor want = at::scatter(at::scatter(x, -1, i, -1.5), 1, j, s) * -1.5;
    EXPECT_TRUE(at::equal((*got)[0], want)) << (*got)[0] << want;
  }
  // Two positions a row, an index over part of self, a reduction: torch's scatter.
  const std::string others = R"IR(
    graph(%x : Tensor, %i : Tensor, %k : Tensor):
      %one : int = prim::Constant[value=1]()
      %v : float = prim::Constant[value=2.0]()
      %add : str = prim::Constant[value="add"]()
      %a : Tensor = aten::scatter(%x, %one, %i, %v)
      %b : Tensor = aten::scatter(%a, %one, %k, %v)
      %c : Tensor = aten::scatter(%b, %one, %k, %v, %add)
      return (%c))IR";
  auto m2 = ImportIR(others, {{DType::kF32, {4, 6}}, {DType::kI64, {4, 2}},
                              {DType::kI64, {3, 1}}});
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(Count(*m2->graph, OpKind::kOpaque), 3) << graph::PrintGraph(*m2->graph);
  const at::Tensor x = at::randn({4, 6});
  const at::Tensor i = at::randint(0, 6, {4, 2}, at::kLong);
  const at::Tensor k = at::randint(0, 6, {3, 1}, at::kLong);
  auto got2 = ReferenceExecutor(&m2->opaque).Run(*m2->graph, {x, i, k});
  ASSERT_TRUE(got2.ok()) << got2.status();
  const at::Tensor b = at::scatter(at::scatter(x, 1, i, 2.0), 1, k, 2.0);
  EXPECT_TRUE(at::equal((*got2)[0], at::scatter(b, 1, k, 2.0, "add")));
}

// `x[:, i]` indexes with a Tensor?[] list that holds None ([None, i]): torch runs the lookup
// (and index_put by such a list) with None in its place, and the ops around it fuse. Before,
// the list stopped the whole import.
TEST_F(TorchScriptImporterTest, IndexListsWithNoneRunThroughTorchAndTheRestFuses) {
  const std::string ir = R"IR(
    graph(%x : Tensor, %i : Tensor, %v : Tensor):
      %none : NoneType = prim::Constant()
      %two : int = prim::Constant[value=2]()
      %true : bool = prim::Constant[value=1]()
      %list : Tensor?[] = prim::ListConstruct(%none, %i)
      %picked : Tensor = aten::index(%x, %list)
      %y : Tensor = aten::mul(%picked, %two)
      %e : Tensor = aten::exp(%x)
      %put : Tensor = aten::index_put(%e, %list, %v, %true)
      %z : Tensor = aten::neg(%put)
      %r : (Tensor, Tensor) = prim::TupleConstruct(%y, %z)
      return (%r))IR";
  auto m = ImportIR(ir, {{DType::kF32, {8, 6}}, {DType::kI64, {4}}, {DType::kF32, {8, 4}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Count(*m->graph, OpKind::kOpaque), 2) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(m->graph->outputs()[0]->type().ToString(), "f32[8,4]");
  EXPECT_EQ(m->graph->outputs()[1]->type().ToString(), "f32[8,6]");
  // Repeated and negative indices, on fresh random values.
  const at::Tensor x = at::randn({8, 6}), i = at::tensor({5, 0, -1, 5}, at::kLong),
                   v = at::randn({8, 4});
  ReferenceExecutor exec(&m->opaque);
  auto got = exec.Run(*m->graph, {x, i, v});
  ASSERT_TRUE(got.ok()) << got.status();
  using at::indexing::Slice;
  EXPECT_TRUE(at::allclose((*got)[0], x.index({Slice(), i}) * 2));
  c10::List<c10::optional<at::Tensor>> list;
  list.push_back(c10::nullopt);
  list.push_back(i);
  EXPECT_TRUE(at::allclose((*got)[1], -at::index_put(at::exp(x), list, v, true), 1e-5, 1e-6));
}

// Symbolic sizes through a transformer's views: [B,T,C] joined to [B*T,C] for a product and
// split back, positions from arange(T) (run by torch at run time, its size bound per call),
// and a reshape by a size computed as B*T. One import serves every B and T.
TEST_F(TorchScriptImporterTest, JoinedViewsAndFactoriesOfDynamicSizesImportOnce) {
  const std::vector<TensorType> spec = {*graph::ParseTensorType("f32[B,T,64]")};
  const int64_t B = graph::SymbolicDim("B"), T = graph::SymbolicDim("T");
  const int64_t BT = graph::MultiplyDims(B, T);
  for (const char* file : {"linear_positions_scripted.pt", "linear_positions_traced.pt"}) {
    SCOPED_TRACE(file);
    auto m = ImportModuleFile(ModelPath(file), spec);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(graph::VerifyGraph(*m->graph).ok()) << graph::PrintGraph(*m->graph);
    EXPECT_EQ(m->graph->outputs()[0]->type(), (TensorType{DType::kF32, {BT, 64}}));
    bool joined = false, factory = false;
    for (const auto& n : m->graph->nodes()) {
      joined |= n->kind() == OpKind::kReshape && n->output()->type().sizes ==
                                                      std::vector<int64_t>{BT, 64};
      factory |= n->kind() == OpKind::kOpaque && n->StringAttr("target") == "aten::arange" &&
                 n->output()->type().sizes == std::vector<int64_t>{T};
    }
    EXPECT_TRUE(joined) << graph::PrintGraph(*m->graph);
    EXPECT_TRUE(factory) << graph::PrintGraph(*m->graph);
    auto module = LoadModule(ModelPath(file));
    ASSERT_TRUE(module.ok());
    for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 8}, {3, 1}, {1, 17}, {4, 33}}) {
      SCOPED_TRACE(::testing::Message() << b << "x" << t);
      at::Tensor x = at::randn({b, t, 64});
      graph::SymbolBinding binding;
      ASSERT_TRUE(binding.Bind(spec[0].sizes, {b, t, 64}).ok());
      ReferenceExecutor run(&m->opaque);
      run.set_binding(&binding);
      auto out = run.Run(*m->graph, {x});
      ASSERT_TRUE(out.ok()) << out.status();
      at::Tensor want = module->forward({x}).toTensor();
      EXPECT_EQ((*out)[0].sizes(), want.sizes());
      EXPECT_TRUE(at::allclose((*out)[0], want, 1e-5, 1e-5));
    }
  }
  // A size that is not a product of the symbols (T + 1) names the node that computes it.
  auto sum = ImportIR(R"IR(
    graph(%x : Tensor):
      %c1 : int = prim::Constant[value=1]()
      %t : int = aten::size(%x, %c1)
      %t1 : int = aten::add(%t, %c1)
      %f : bool = prim::Constant[value=0]()
      %l : int[] = prim::ListConstruct(%c1, %t1)
      %y : Tensor = aten::expand(%x, %l, %f)
      return (%y))IR",
                     {*graph::ParseTensorType("f32[1,T]")});
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.status().message().find("aten::add"), std::string::npos) << sum.status();
}

// An op torch runs on four dynamic dims (an attention's [B, H, T, D]) and one that multiplies
// them (a matmul's scores): the result types are found without element counts overflowing.
TEST_F(TorchScriptImporterTest, TorchRunOpsOfManyDynamicDimsImport) {
  const std::vector<TensorType> spec = {*graph::ParseTensorType("f32[B,H,T,D]")};
  auto m = ImportIR(R"IR(
    graph(%x : Tensor):
      %c3 : int = prim::Constant[value=3]()
      %c2 : int = prim::Constant[value=2]()
      %none : NoneType = prim::Constant()
      %s : Tensor = aten::cumsum(%x, %c3, %none)
      %t : Tensor = aten::transpose(%x, %c2, %c3)
      %p : Tensor = aten::matmul(%s, %t)
      %y : Tensor = aten::exp(%p)
      return (%y))IR",
                    spec);
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t B = graph::SymbolicDim("B"), H = graph::SymbolicDim("H"),
                T = graph::SymbolicDim("T");
  EXPECT_EQ(m->graph->outputs()[0]->type(), (TensorType{DType::kF32, {B, H, T, T}}));
  for (auto sizes : {std::vector<int64_t>{2, 3, 5, 4}, {1, 2, 9, 16}}) {
    at::Tensor x = at::randn(sizes) * 0.1;
    graph::SymbolBinding binding;
    ASSERT_TRUE(binding.Bind(spec[0].sizes, sizes).ok());
    ReferenceExecutor run(&m->opaque);
    run.set_binding(&binding);
    auto out = run.Run(*m->graph, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(at::allclose((*out)[0], at::exp(at::matmul(at::cumsum(x, 3), x.transpose(2, 3))),
                             1e-5, 1e-5));
  }
}

// A static buffer cut to a dynamic length (a causal mask sliced to the sequence): one import
// for every length, each call's length checked against the buffer's.
TEST_F(TorchScriptImporterTest, StaticBuffersSlicedToADynamicLengthImportOnce) {
  const std::vector<TensorType> spec = {*graph::ParseTensorType("f32[B,T,T]"),
                                        *graph::ParseTensorType("bool[16,16]")};
  auto m = ImportIR(R"IR(
    graph(%x : Tensor, %buf : Tensor):
      %c0 : int = prim::Constant[value=0]()
      %c1 : int = prim::Constant[value=1]()
      %fill : float = prim::Constant[value=-1.0]()
      %t : int = aten::size(%x, %c1)
      %r : Tensor = aten::slice(%buf, %c0, %c0, %t, %c1)
      %m : Tensor = aten::slice(%r, %c1, %c0, %t, %c1)
      %nm : Tensor = aten::logical_not(%m)
      %y : Tensor = aten::masked_fill(%x, %nm, %fill)
      return (%y))IR",
                    spec);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(graph::VerifyGraph(*m->graph).ok()) << graph::PrintGraph(*m->graph);
  EXPECT_EQ(m->graph->outputs()[0]->type(), spec[0]);
  ReferenceExecutor run(&m->opaque);
  const at::Tensor buf = at::rand({16, 16}) > 0.5;
  for (int64_t t : {1, 7, 16}) {
    SCOPED_TRACE(t);
    const at::Tensor x = at::randn({2, t, t});
    graph::SymbolBinding binding;
    ASSERT_TRUE(binding.Bind(spec[0].sizes, {2, t, t}).ok());
    run.set_binding(&binding);
    auto out = run.Run(*m->graph, {x, buf});
    ASSERT_TRUE(out.ok()) << out.status();
    const at::Tensor cut = buf.slice(0, 0, t).slice(1, 0, t);
    EXPECT_TRUE(at::equal((*out)[0], x.masked_fill(cut.logical_not(), -1.0)));
  }
  // Past the buffer, torch would cut 16 rows where the types say 17: an error, not a read
  // past the buffer.
  const at::Tensor x = at::randn({2, 17, 17});
  graph::SymbolBinding binding;
  ASSERT_TRUE(binding.Bind(spec[0].sizes, {2, 17, 17}).ok());
  run.set_binding(&binding);
  auto out = run.Run(*m->graph, {x, buf});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("past the 16"), std::string::npos) << out.status();
}

// Convolutions carry their geometry from the import (attribute conv2d: stride, padding,
// dilation, groups; conv_bias: whether a bias is an operand), which the runtime's depthwise
// kernel reads: aten::convolution with a bias and one without, and aten::conv2d. A transposed
// convolution and a padding given as a string ("same") carry none: torch runs them as they are.
TEST_F(TorchScriptImporterTest, ConvolutionsCarryTheirGeometry) {
  auto m = ImportIR(R"IR(
    graph(%x : Tensor, %w : Tensor, %b : Tensor, %wt : Tensor):
      %none : NoneType = prim::Constant()
      %false : bool = prim::Constant[value=0]()
      %true : bool = prim::Constant[value=1]()
      %g : int = prim::Constant[value=8]()
      %stride : int[] = prim::Constant[value=[2, 1]]()
      %pad : int[] = prim::Constant[value=[1, 2]]()
      %dil : int[] = prim::Constant[value=[1, 2]]()
      %unit : int[] = prim::Constant[value=[1, 1]]()
      %zero : int[] = prim::Constant[value=[0, 0]]()
      %same : str = prim::Constant[value="same"]()
      %a : Tensor = aten::convolution(%x, %w, %b, %stride, %pad, %dil, %false, %zero, %g)
      %c : Tensor = aten::convolution(%x, %w, %none, %unit, %unit, %unit, %false, %zero, %g)
      %d : Tensor = aten::conv2d(%x, %w, %b, %unit, %unit, %unit, %g)
      %t : Tensor = aten::convolution(%x, %wt, %none, %unit, %zero, %unit, %true, %zero, %g)
      %e : Tensor = aten::conv2d(%x, %w, %b, %unit, %same, %unit, %g)
      %r : (Tensor, Tensor, Tensor, Tensor, Tensor) = prim::TupleConstruct(%a, %c, %d, %t, %e)
      return (%r))IR",
                    {{DType::kF32, {2, 8, 9, 10}}, {DType::kF32, {8, 1, 3, 3}},
                     {DType::kF32, {8}}, {DType::kF32, {8, 1, 3, 3}}});
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<const graph::Node*> convs;
  for (const auto& n : m->graph->nodes()) {
    if (n->kind() == OpKind::kOpaque) convs.push_back(n.get());
  }
  ASSERT_EQ(convs.size(), 5u) << graph::PrintGraph(*m->graph);
  const std::vector<std::vector<int64_t>> geometry = {
      {2, 1, 1, 2, 1, 2, 8}, {1, 1, 1, 1, 1, 1, 8}, {1, 1, 1, 1, 1, 1, 8}};
  const std::vector<int64_t> bias = {1, 0, 1};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(convs[i]->HasAttr("conv2d")) << i << "\n" << graph::PrintGraph(*m->graph);
    EXPECT_EQ(convs[i]->IntsAttr("conv2d"), geometry[i]) << i;
    EXPECT_EQ(convs[i]->IntAttr("conv_bias"), bias[i]) << i;
    EXPECT_EQ(convs[i]->inputs().size(), bias[i] == 1 ? 3u : 2u) << i;
  }
  EXPECT_FALSE(convs[3]->HasAttr("conv2d")) << "transposed";
  EXPECT_FALSE(convs[4]->HasAttr("conv2d")) << "padding \"same\"";
  // The convolutions run as torch's (the reference), with the model's values.
  const at::Tensor x = at::randn({2, 8, 9, 10}), w = at::randn({8, 1, 3, 3}),
                   b = at::randn({8}), wt = at::randn({8, 1, 3, 3});
  auto out = RunReference(*m, {x, w, b, wt});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(at::allclose((*out)[0], at::conv2d(x, w, b, {2, 1}, {1, 2}, {1, 2}, 8)));
  EXPECT_TRUE(at::allclose((*out)[1], at::conv2d(x, w, {}, 1, 1, 1, 8)));
}

}  // namespace
}  // namespace torchfuse::frontend
