#include "runtime/compiled_module.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "cache/files.h"
#include "codegen_nvrtc/compile_pool.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "frontend_torch/torch_types.h"
#include "frontend_torch/torchscript_importer.h"
#include "graph/graph.h"
#include "runtime/gather_runner.h"
#include "../frontend_torch/test_models.h"
#include "../support/scoped_env.h"

namespace torchfuse {
namespace {

using testing::ModelPath;

using testing::Flatten;
using testing::RelativeError;
using testing::Tolerance;

class CompiledModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }

  torch::jit::Module Load(const std::string& file, c10::optional<at::ScalarType> dtype = {}) {
    auto m = frontend::LoadModule(ModelPath(file));
    EXPECT_TRUE(m.ok()) << m.status();
    m->eval();
    m->to(at::kCUDA);
    if (dtype) m->to(*dtype);
    return *m;
  }

  // Runs `compiled` and the module on the same inputs and checks every output.
  void ExpectMatches(CompiledModule& compiled, torch::jit::Module& module,
                     const std::vector<at::Tensor>& inputs) {
    std::vector<c10::IValue> in(inputs.begin(), inputs.end());
    std::vector<at::Tensor> got = Flatten(compiled.forward(in));
    std::vector<at::Tensor> want = Flatten(module.forward(in));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes());
      EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type());
      EXPECT_TRUE(got[i].is_cuda());
      EXPECT_LE(RelativeError(got[i], want[i]), Tolerance(want[i].scalar_type()))
          << "output " << i;
    }
  }

  static at::Tensor Rand(std::vector<int64_t> sizes, at::ScalarType dtype = at::kFloat) {
    at::Tensor t = at::randn(sizes, at::TensorOptions().device(at::kCUDA)).to(dtype);
    return t;
  }
};

TEST_F(CompiledModuleTest, HandWrittenGeluIsOneKernelInEveryDtype) {
  for (const char* file : {"gelu_scripted.pt", "gelu_traced.pt"}) {
    for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
      torch::jit::Module m = Load(file);
      CompiledModule c = Compile(m);
      ExpectMatches(c, m, {Rand({64, 1024}, dt)});
      EXPECT_EQ(c.last_call_stats().fused_launches, 1) << file;
      EXPECT_EQ(c.last_call_stats().torch_ops, 0) << file;
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
    }
  }
}

// lm_head_scripted.pt's outputs: logits, biased logits, softmax(logits.float()), a product and
// a weight gradient. The products are eager's within the dtype's tolerance; the softmax is
// checked against the softmax of the logits the compiled model returned, at f32's: over 16-bit
// logits that another product kernel rounded differently, eager's softmax differs by about the
// tolerance itself, so comparing with it would say little and fail at random.
double LmHeadError(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                   size_t i) {
  if (i == 2) return RelativeError(got[2], at::softmax(got[0].to(at::kFloat), -1));
  return RelativeError(got[i], want[i]);
}
double LmHeadTolerance(at::ScalarType dt, size_t i) {
  return Tolerance(i == 2 ? at::kFloat : dt);
}

TEST_F(CompiledModuleTest, ProductsWithUnalignedDimsMatchEagerAndComeBackContiguous) {
  // An LM head's odd vocabulary, and its weight gradient (whose transposed operand has an odd
  // leading dim): the products run on padded copies.
  torch::jit::Module m = Load("lm_head_scripted.pt");
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf, at::kFloat}) {
    const int64_t vocab = 5003;
    const at::Tensor x = Rand({4, 512, 768}, dt), w = Rand({vocab, 768}, dt) * 0.05;
    const at::Tensor b = Rand({vocab}, dt), y = Rand({2048, 768}, dt);
    const at::Tensor g = Rand({2048, vocab}, dt);  // a gradient of logits: M of g.t() is odd
    CompiledModule c = Compile(m);
    std::vector<c10::IValue> in = {x, w, b, y, g};
    std::vector<at::Tensor> got = Flatten(c.forward(in));
    std::vector<at::Tensor> want = Flatten(m.forward(in));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
      EXPECT_TRUE(got[i].is_contiguous()) << i;
      EXPECT_LE(LmHeadError(got, want, i), LmHeadTolerance(dt, i)) << c10::toString(dt) << " " << i;
    }
  }
}

// The padded copy of a weight serves the later calls while the weight is unchanged; an
// in-place update of it, another weight or another gradient is copied anew, and every call
// matches eager on the tensors it was given.
TEST_F(CompiledModuleTest, PaddedCopiesOfAnUnchangedOperandAreMadeOnce) {
  torch::jit::Module m = Load("lm_head_scripted.pt");
  const int64_t vocab = 5003;
  const at::ScalarType dt = at::kBFloat16;
  at::Tensor x = Rand({4, 512, 768}, dt), w = Rand({vocab, 768}, dt) * 0.05;
  const at::Tensor b = Rand({vocab}, dt), y = Rand({2048, 768}, dt);
  at::Tensor g = Rand({2048, vocab}, dt);
  CompiledModule c = Compile(m);
  auto expect_matches = [&](const std::vector<at::Tensor>& inputs) {
    std::vector<c10::IValue> in(inputs.begin(), inputs.end());
    std::vector<at::Tensor> got = Flatten(c.forward(in));
    std::vector<at::Tensor> want = Flatten(m.forward(in));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
      EXPECT_LE(LmHeadError(got, want, i), LmHeadTolerance(dt, i)) << "output " << i;
    }
  };
  // The weight (three products share its copy) and the gradient g, whose transpose is padded.
  expect_matches({x, w, b, y, g});
  EXPECT_EQ(c.last_call_stats().padded_copies, 2);
  expect_matches({x, w, b, y, g});
  EXPECT_EQ(c.last_call_stats().padded_copies, 0);
  g = Rand({2048, vocab}, dt);
  expect_matches({x, w, b, y, g});
  EXPECT_EQ(c.last_call_stats().padded_copies, 1);
  w.mul_(0.5);  // an optimizer's step: same memory, new version
  expect_matches({x, w, b, y, g});
  EXPECT_EQ(c.last_call_stats().padded_copies, 1);
  expect_matches({Rand({4, 512, 768}, dt), Rand({vocab, 768}, dt) * 0.05, b, y, g});
  EXPECT_EQ(c.last_call_stats().padded_copies, 1);
  EXPECT_EQ(c.stats().padded_copies, 5);
}

// A call of the layout of an earlier one launches what that call launched without working
// it out again; a call whose inputs are aligned differently (a view one element into its
// storage) must not take the vectorized kernel of the aligned call, and the other way round.
TEST_F(CompiledModuleTest, RepeatedLayoutsAndMisalignedViewsOfThemMatchEager) {
  for (const char* file : {"gelu_scripted.pt", "softmax_scripted.pt"}) {
    for (bool dynamic : {false, true}) {
      SCOPED_TRACE(::testing::Message() << file << (dynamic ? " dynamic" : " static"));
      torch::jit::Module m = Load(file);
      Options options;
      if (dynamic) options.input_specs = {"f32[B,T]"};
      CompiledModule c = Compile(m, options);
      for (int64_t t : {1024, 1024, 1000, 1024, 1000}) {
        at::Tensor storage = Rand({64 * t + 1});
        at::Tensor aligned = storage.narrow(0, 0, 64 * t).view({64, t});
        at::Tensor shifted = storage.narrow(0, 1, 64 * t).view({64, t});
        for (const at::Tensor& x : {aligned, shifted, aligned, shifted}) {
          ExpectMatches(c, m, {x});
          EXPECT_EQ(c.last_call_stats().fused_launches, 1);
          EXPECT_EQ(c.last_call_stats().eager_calls, 0);
        }
      }
      EXPECT_EQ(c.stats().specializations, dynamic ? 1 : 2);
    }
  }
}

// A copy of a permuted view whose layout is contiguous already (attention's output, laid out
// as its query, permuted back) is that view, as Tensor.contiguous returns it: nothing launches.
// The copy of a layout that needs it still launches, call after call.
TEST_F(CompiledModuleTest, CopiesOfLayoutsThatAreContiguousAlreadyLaunchNothing) {
  torch::jit::Module m = Load("copies_of_torch_results_scripted.pt");
  CompiledModule c = Compile(m);
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    ExpectMatches(c, m, {Rand({64, 64}), Rand({64, 64})});
    // The copy of atan(x).t() and the sum: two kernels; atan twice and mm twice in torch.
    EXPECT_EQ(c.last_call_stats().fused_launches, 2);
    EXPECT_EQ(c.last_call_stats().torch_ops, 4);
  }
}

// Views between ops torch runs are built without torch once their input's layout has been
// seen: results still match eager call after call, for inputs at other storage offsets and,
// in a plan for every size, at other sizes; a reshape that copies stays torch's.
TEST_F(CompiledModuleTest, ViewsOfLayoutsSeenBeforeMatchEager) {
  torch::jit::Module m = Load("views_between_torch_ops_scripted.pt");
  for (bool dynamic : {false, true}) {
    SCOPED_TRACE(dynamic ? "dynamic" : "static");
    Options options;
    if (dynamic) options.input_specs = {"f32[N,64]", "f32[64,128]"};
    CompiledModule c = Compile(m, options);
    int64_t repeated = -1;
    for (int64_t n : {64, 64, 48, 64, 48, 48}) {
      SCOPED_TRACE(n);
      at::Tensor storage = Rand({64 * 128 + 1});
      for (int64_t shift : {0, 1, 1, 0}) {
        at::Tensor w = storage.narrow(0, shift, 64 * 128).view({64, 128});
        ExpectMatches(c, m, {Rand({n, 64}), w});
        EXPECT_EQ(c.last_call_stats().eager_calls, 0);
      }
      // The last call's layouts were all seen before: every view is built directly.
      const int64_t direct = c.last_call_stats().direct_views;
      EXPECT_GT(direct, 0);
      if (repeated < 0) repeated = direct;
      EXPECT_EQ(direct, repeated);
    }
    EXPECT_EQ(c.stats().specializations, dynamic ? 1 : 2);
  }
}

// Embedding lookups run as torchfuse's gather kernel, for int64 and int32 indices, f32 and
// bf16 tables, a row whose bytes 16 does not divide (bf16 x 100) and a table at an odd offset;
// a table that is not contiguous is torch's lookup. Every result is eager's, bit for bit.
TEST_F(CompiledModuleTest, EmbeddingLookupsAreGatherKernelsThatMatchEager) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module m = Load("embedding_lookups_scripted.pt", dt);
    CompiledModule c = Compile(m);
    for (at::ScalarType index_type : {at::kLong, at::kInt}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " " << c10::toString(index_type));
      const at::Tensor ids = at::randint(0, 64, {4, 16}, at::TensorOptions().device(at::kCUDA))
                                 .to(index_type);
      const at::Tensor table = Rand({1000, 100}, dt);
      ExpectMatches(c, m, {ids, table});
      const int64_t contiguous = c.last_call_stats().gather_launches;
      EXPECT_GE(contiguous, 2);  // the argument's table and the token table at least
      std::vector<c10::IValue> in = {ids, table};
      EXPECT_TRUE(Flatten(c.forward(in))[1].equal(Flatten(m.forward(in))[1]));
      // At an odd offset: narrower loads.
      const at::Tensor shifted = Rand({1000 * 100 + 1}, dt).narrow(0, 1, 1000 * 100).view({1000, 100});
      ExpectMatches(c, m, {ids, shifted});
      EXPECT_EQ(c.last_call_stats().gather_launches, contiguous);
      // Not contiguous: torch looks it up.
      const at::Tensor transposed = Rand({100, 1000}, dt).t();
      ExpectMatches(c, m, {ids, transposed});
      EXPECT_EQ(c.last_call_stats().gather_launches, contiguous - 1);
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
    }
  }
}

// Depthwise convolutions over channels-last or NCHW activations run as torchfuse's kernel,
// their bias added in it: ConvNeXt's 7x7, a 3x3 of stride 2 without a bias, a dilated 3x3, in
// f32, f16 and bf16; the ordinary 1x1 convolution stays torch's, and so does a depthwise one
// whose input is neither channels-last nor contiguous. Every output is eager's (cuDNN's)
// within the dtype's tolerance.
TEST_F(CompiledModuleTest, DepthwiseConvolutionsRunAsTorchfusesKernelInEitherLayout) {
  for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dt));
    torch::jit::Module m = Load("depthwise_convs_scripted.pt", dt);
    CompiledModule c = Compile(m);
    const at::Tensor x = Rand({2, 32, 20, 18}, dt).contiguous(at::MemoryFormat::ChannelsLast);
    ExpectMatches(c, m, {x});
    // The three depthwise ones (the GELU's kernel writes channels-last too), never the 1x1.
    EXPECT_EQ(c.last_call_stats().conv_launches, 3);
    ExpectMatches(c, m, {Rand({2, 32, 20, 18}, dt)});  // NCHW: the NCHW kernel
    EXPECT_EQ(c.last_call_stats().conv_launches, 3);
    // H and W transposed: neither layout, so the 7x7 is torch's (with a warning).
    ExpectMatches(c, m, {Rand({2, 32, 18, 20}, dt).transpose(2, 3)});
    EXPECT_EQ(c.last_call_stats().conv_launches, 2);
    EXPECT_EQ(c.last_call_stats().eager_calls, 0);
  }
}

// Tensors indexed by one index tensor (`table[indices]`, aten::index) run as the gather kernel:
// a window's relative position bias from its table at a constant index, added to scores before
// a softmax, and a table of three dims looked up by int64 and int32 indices with negative ones,
// in f32 and bf16. A table that is not contiguous is torch's. Every result is eager's.
TEST_F(CompiledModuleTest, IndexedRowsAreGatherKernelsThatCountNegativeIndicesFromTheEnd) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    // Not converted to dt: the tables are arguments, and the index buffer stays int64.
    torch::jit::Module m = Load("index_rows_scripted.pt");
    CompiledModule c = Compile(m);
    for (at::ScalarType index_type : {at::kLong, at::kInt}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " " << c10::toString(index_type));
      const at::Tensor ids = at::randint(-64, 64, {4, 16}, cuda).to(index_type);
      ASSERT_TRUE(ids.lt(0).any().item<bool>());
      const at::Tensor scores = Rand({2, 3, 49, 49}, dt), bias = Rand({169, 3}, dt);
      ExpectMatches(c, m, {ids, Rand({64, 6, 5}, dt), scores, bias});
      EXPECT_EQ(c.last_call_stats().gather_launches, 2);
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
      const at::Tensor table = Rand({64, 6, 5}, dt);
      std::vector<c10::IValue> in = {ids, table, scores, bias};
      EXPECT_TRUE(Flatten(c.forward(in))[1].equal(Flatten(m.forward(in))[1]));
      // Not contiguous: torch's lookup.
      ExpectMatches(c, m, {ids, Rand({6, 64, 5}, dt).transpose(0, 1), scores, bias});
      EXPECT_EQ(c.last_call_stats().gather_launches, 1);
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
    }
  }
}

// Indexing by buffers: a mask's rows (counted at import) through torch, row indices (one
// negative) through the gather kernel. x[mask] by an argument's mask, whose result's sizes no
// type holds, runs eagerly with a warning naming it. Every result is eager's.
TEST_F(CompiledModuleTest, IndexingByBuffersAndByMasksMatchesEager) {
  torch::jit::Module m = Load("constant_index_rows_scripted.pt");
  CompiledModule c = Compile(m);
  ExpectMatches(c, m, {Rand({8, 4})});
  EXPECT_EQ(c.last_call_stats().gather_launches, 1);
  EXPECT_EQ(c.last_call_stats().eager_calls, 0);

  torch::jit::Module masked = Load("masked_rows_scripted.pt");
  CompiledModule d = Compile(masked);
  for (int i = 0; i < 2; ++i) {
    const at::Tensor mask = at::rand({8}, at::TensorOptions().device(at::kCUDA)) > 0.5;
    ExpectMatches(d, masked, {Rand({8, 4}), mask});
    EXPECT_EQ(d.last_call_stats().eager_calls, 1);
  }
}

// A plan prepared ahead of its first call (as the torch.compile backend does while Dynamo
// finishes): its kernels compile on the pool meanwhile, so the call compiles nothing, counts the
// plan as its specialization, and matches eager; a second preparation finds a plan and
// prepares nothing, and the calls of other sizes compile as before.
TEST_F(CompiledModuleTest, PreparedPlanCompilesItsKernelsAheadOfTheFirstCall) {
  torch::jit::Module m = Load("softmax_scripted.pt");
  Options options;
  options.tune_budget_ms = 0;  // no tuning: no candidate compiles during or after the call
  options.cache_dir = absl::StrCat(::testing::TempDir(), "/prepared_plan_", getpid());
  CompiledModule c = Compile(m, options);
  codegen::ResetProcessKernelCache();
  const int64_t before = codegen::NvrtcCompileCount();
  absl::StatusOr<Explanation> x = c.Prepare({{graph::DType::kF32, {64, 1000}}}, 0);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->kernels, 1) << x->ToString();
  EXPECT_EQ(c.stats().specializations, 1);
  EXPECT_EQ(c.stats().calls, 0);
  codegen::WaitForCompiles();
  const int64_t ahead = codegen::NvrtcCompileCount() - before;
  EXPECT_GE(ahead, 1);
  ExpectMatches(c, m, {Rand({64, 1000})});
  EXPECT_EQ(codegen::NvrtcCompileCount() - before, ahead);  // the call found its kernel
  EXPECT_EQ(c.last_call_stats().specializations, 1);
  EXPECT_EQ(c.last_call_stats().fused_launches, 1);
  ExpectMatches(c, m, {Rand({64, 1000})});
  EXPECT_EQ(c.last_call_stats().specializations, 0);
  EXPECT_EQ(c.stats().specializations, 1);
  EXPECT_EQ(c.Prepare({{graph::DType::kF32, {64, 1000}}}, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ExpectMatches(c, m, {Rand({32, 1000})});
  EXPECT_EQ(c.stats().specializations, 2);
  EXPECT_EQ(c.last_call_stats().eager_calls, 0);
}

// An embedding lookup's kernel and a scatter-add's compile on the pool ahead of their calls
// (the plan warms them with its groups' kernels): warmed for the nodes' types, the calls that
// follow compile nothing more, and match torch.
TEST_F(CompiledModuleTest, IndexKernelsCompileAheadOfTheirCalls) {
  using graph::DType;
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  graph::Graph g;
  graph::Value* table = g.AddInput({DType::kBF16, {1000, 96}});
  graph::Value* ids = g.AddInput({DType::kI32, {4, 16}});
  graph::Value* base = g.AddInput({DType::kF32, {24, 100}});
  graph::Value* long_ids = g.AddInput({DType::kI64, {4, 16}});
  graph::Value* values = g.AddInput({DType::kF32, {4, 16, 100}});
  const graph::Node* lookup =
      g.AppendNode(graph::OpKind::kOpaque, {table, ids}, {{"target", std::string("aten::embedding")}},
                   {{DType::kBF16, {4, 16, 96}}});
  const graph::Node* scatter = g.AppendNode(
      graph::OpKind::kOpaque, {base, long_ids, values},
      {{"target", std::string("aten::index_put")}, {"scatter_add", int64_t{1}}},
      {{DType::kF32, {24, 100}}});
  ASSERT_TRUE(runtime::GatherRunner::Takes(*lookup));
  ASSERT_TRUE(runtime::GatherRunner::TakesScatterAdd(*scatter));
  codegen::ResetProcessKernelCache();
  runtime::GatherRunner gather{runtime::RunnerEnv()};
  const int64_t before = codegen::NvrtcCompileCount();
  gather.Warm(*lookup, at::Device(at::kCUDA, 0));
  gather.Warm(*scatter, at::Device(at::kCUDA, 0));
  codegen::WaitForCompiles();
  EXPECT_EQ(codegen::NvrtcCompileCount() - before, 2);

  const at::Tensor t = Rand({1000, 96}, at::kBFloat16);
  const at::Tensor i = at::randint(0, 1000, {4, 16}, cuda).to(at::kInt);
  absl::StatusOr<std::optional<at::Tensor>> looked_up = gather.Run(t, i);
  ASSERT_TRUE(looked_up.ok()) << looked_up.status();
  ASSERT_TRUE(looked_up->has_value());
  EXPECT_TRUE((**looked_up).equal(at::embedding(t, i.to(at::kLong))));

  const at::Tensor b = Rand({24, 100}), v = Rand({4, 16, 100});
  const at::Tensor rows = at::randint(-12, 12, {4, 16}, cuda).to(at::kLong);
  absl::StatusOr<std::optional<at::Tensor>> added = gather.ScatterAdd(b, rows, v);
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_TRUE(added->has_value());
  const at::Tensor want = b.index_put({rows}, v, /*accumulate=*/true);
  EXPECT_LE(RelativeError(**added, want), Tolerance(at::kFloat));
  // Onto a table of one value (zeros_like's constant): filled, not copied, whatever `b` holds.
  absl::StatusOr<std::optional<at::Tensor>> filled = gather.ScatterAdd(b, rows, v, 0.5);
  ASSERT_TRUE(filled.ok()) << filled.status();
  ASSERT_TRUE(filled->has_value());
  const at::Tensor want_filled = at::full_like(b, 0.5).index_put({rows}, v, true);
  EXPECT_LE(RelativeError(**filled, want_filled), Tolerance(at::kFloat));
  EXPECT_EQ(codegen::NvrtcCompileCount() - before, 2);  // all calls found their kernels
  // The plan finds that one value through the views of an expanded constant only.
  graph::Graph h;
  graph::Value* c = h.AppendConstant(0.25, DType::kF32, false)->output();
  graph::Value* wide =
      (*h.Append(graph::OpKind::kExpand, {c}, {{"shape", std::vector<int64_t>{6, 4}}}))->output();
  graph::Value* flat =
      (*h.Append(graph::OpKind::kReshape, {wide}, {{"shape", std::vector<int64_t>{24}}}))
          ->output();
  graph::Value* doubled = (*h.Append(graph::OpKind::kMul, {flat, flat}))->output();
  EXPECT_EQ(runtime::GatherRunner::UniformValue(flat), std::optional<double>(0.25));
  EXPECT_EQ(runtime::GatherRunner::UniformValue(doubled), std::nullopt);
  EXPECT_EQ(runtime::GatherRunner::UniformValue(base), std::nullopt);
}

// index_put with accumulate over a table's rows (an embedding's backward): a copy and the
// scatter-add kernel, for f32 and f64, int64 and int32 indices, with repeated and negative
// indices; into zeros and onto a tensor. An index_put without accumulate, bf16 data and
// torch's deterministic mode stay torch's. Every result is eager's within the dtype's tolerance
// (repeated rows add in another order).
TEST_F(CompiledModuleTest, IndexPutsWithAccumulateAreScatterAddKernelsThatMatchEager) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (at::ScalarType dt : {at::kFloat, at::kDouble, at::kBFloat16}) {
    torch::jit::Module m = Load("index_put_accumulate_scripted.pt", dt);
    CompiledModule c = Compile(m);
    for (at::ScalarType index_type : {at::kLong, at::kInt}) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dt) << " " << c10::toString(index_type));
      // 64 indices over 24 rows: most repeat; the negative ones count from the end.
      const at::Tensor ids = at::randint(-12, 12, {4, 16}, cuda).to(index_type);
      ExpectMatches(c, m, {ids, Rand({4, 16, 100}, dt), Rand({1000, 100}, dt)});
      EXPECT_EQ(c.last_call_stats().scatter_launches, dt == at::kBFloat16 ? 0 : 2);
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
    }
  }
  torch::jit::Module m = Load("index_put_accumulate_scripted.pt");
  CompiledModule c = Compile(m);
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, false);
  const at::Tensor ids = at::randint(0, 1000, {4, 16}, cuda).to(at::kLong);
  const at::Tensor grad = Rand({4, 16, 100}), base = Rand({1000, 100});
  std::vector<c10::IValue> in = {ids, grad, base};
  const std::vector<at::Tensor> got = Flatten(c.forward(in));
  const std::vector<at::Tensor> want = Flatten(m.forward(in));
  const int64_t scatters = c.last_call_stats().scatter_launches;
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_EQ(scatters, 0);  // atomic adds are not deterministic: torch's sort-based kernel
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << i;
}

TEST_F(CompiledModuleTest, BiasGeluIsOneKernel) {
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module m = Load("bias_gelu_traced.pt", dt);
    CompiledModule c = Compile(m);
    ExpectMatches(c, m, {Rand({256, 1024}, dt)});
    EXPECT_EQ(c.last_call_stats().fused_launches, 1);
    EXPECT_EQ(c.last_call_stats().torch_ops, 0);
  }
}

TEST_F(CompiledModuleTest, BroadcastChainWithParameters) {
  torch::jit::Module m = Load("broadcast_chain_scripted.pt");
  CompiledModule c = Compile(m);
  ExpectMatches(c, m, {Rand({33, 1024})});
  EXPECT_EQ(c.last_call_stats().fused_launches, 1);
}

TEST_F(CompiledModuleTest, TransposedInputIsIndexedByStrides) {
  torch::jit::Module m = Load("gelu_scripted.pt");
  CompiledModule c = Compile(m);
  at::Tensor x = Rand({1024, 96}).t();  // non-contiguous [96,1024]
  ASSERT_FALSE(x.is_contiguous());
  ExpectMatches(c, m, {x});
  at::Tensor sliced = Rand({64, 2048}).slice(1, 1, 1025);  // misaligned rows
  ExpectMatches(c, m, {sliced});
}

TEST_F(CompiledModuleTest, OddSizesAndEmptyTensors) {
  torch::jit::Module m = Load("gelu_scripted.pt");
  CompiledModule c = Compile(m);
  for (std::vector<int64_t> sizes : std::vector<std::vector<int64_t>>{
           {1}, {7}, {1000003}, {3, 7}, {0}, {0, 16}, {5, 1, 3}}) {
    ExpectMatches(c, m, {Rand(sizes)});
  }
}

TEST_F(CompiledModuleTest, MlpIsFourFusedKernelsAndFourMatmuls) {
  torch::jit::Module m = Load("mlp_traced.pt");
  CompiledModule c = Compile(m);
  ExpectMatches(c, m, {Rand({64, 256})});
  EXPECT_EQ(c.last_call_stats().fused_launches, 4);
  EXPECT_EQ(c.last_call_stats().torch_ops, 4);
}

// In f16 and bf16 each GELU of the MLP is its product's cuBLASLt epilogue: no kernel of
// torchfuse's runs, and the outputs are eager's within the dtype's tolerance, for a batch
// whose rows are not a multiple of the product's tiles too.
TEST_F(CompiledModuleTest, HalfPrecisionMlpRunsEachGeluInItsProductsEpilogue) {
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf}) {
    torch::jit::Module m = Load("mlp_traced.pt", dt);
    CompiledModule c = Compile(m);
    for (int64_t batch : {64, 1000}) {
      ExpectMatches(c, m, {Rand({batch, 256}, dt)});
      EXPECT_EQ(c.last_call_stats().fused_launches, 0) << c10::toString(dt);
      EXPECT_EQ(c.last_call_stats().torch_ops, 4);
    }
    test_support::ScopedEnv apart("TORCHFUSE_MATMUL_EPILOGUE", "0");
    CompiledModule separate = Compile(m);
    ExpectMatches(separate, m, {Rand({64, 256}, dt)});
    EXPECT_EQ(separate.last_call_stats().fused_launches, 4);
  }
}

TEST_F(CompiledModuleTest, BatchSizeChangeReusesTheBinary) {
  torch::jit::Module m = Load("bias_gelu_scripted.pt");
  // Tuning before each first call: every candidate of every batch size is compiled then.
  Options sync;
  sync.tune_mode = "sync";
  CompiledModule c = Compile(m, sync);
  ExpectMatches(c, m, {Rand({32, 1024})});
  const int64_t compiles = codegen::NvrtcCompileCount();
  ExpectMatches(c, m, {Rand({48, 1024})});
  ExpectMatches(c, m, {Rand({512, 1024})});
  codegen::WaitForCompiles();
  EXPECT_EQ(codegen::NvrtcCompileCount(), compiles);
  // The first batch's plan, then one with a dynamic batch for the rest.
  EXPECT_EQ(c.stats().specializations, 2);
}

// Dynamic shapes: a second shape compiles one plan whose changing dims are symbols; every later
// shape that differs only there runs it, row kernels reading their length at run time.
TEST_F(CompiledModuleTest, DynamicRowLengthsCompileOnePlanAndNoKernelTwicePerBucket) {
  // Kernels only: where torch's own softmax times faster (8 rows of 90001 on an H200), the tuner
  // would run it, and this test is about the fused kernels of every length.
  test_support::ScopedEnv kernels_only("TORCHFUSE_TUNE_TORCH", "0");
  // A cache of its own: tests running beside it tune the same softmax kernels, and a record one
  // of them writes between two calls here may name a kernel this process has yet to compile.
  Options options;
  options.cache_dir = absl::StrCat(cache::TempDir(), "/tf-dynamic-rows-test-", ::getpid());
  ASSERT_TRUE(cache::RemoveTree(options.cache_dir).ok());
  for (const char* file : {"softmax_scripted.pt", "softmax_traced.pt", "torch_softmax_scripted.pt",
                           "log_softmax_scripted.pt"}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << file << " " << c10::toString(dt));
      torch::jit::Module m = Load(file);
      CompiledModule c = Compile(m, options);
      // Odd, tiny and long lengths: 1, 7, 1000, 1023, past one block's registers and past the
      // longest bucket (looped rows of any length).
      const std::vector<int64_t> lengths = {256, 1000, 1, 7, 1023, 4096, 20000, 70001};
      for (int64_t t : lengths) {
        SCOPED_TRACE(::testing::Message() << "T=" << t);
        ExpectMatches(c, m, {Rand({8, t}, dt)});
        EXPECT_EQ(c.last_call_stats().fused_launches, 1);
        EXPECT_EQ(c.last_call_stats().torch_ops, 0);
        EXPECT_EQ(c.last_call_stats().eager_calls, 0);
      }
      // The first shape's plan, then one for every length.
      EXPECT_EQ(c.stats().specializations, 2);
      EXPECT_NE(c.last_graph().find("[8,s"), std::string::npos) << c.last_graph();
      // New lengths in buckets (and vector widths) already met compile nothing.
      codegen::WaitForCompiles();
      const int64_t compiles = codegen::NvrtcCompileCount();
      for (int64_t t : {996, 1019, 3000, 17000, 90001, 5, 1021}) {
        SCOPED_TRACE(::testing::Message() << "T=" << t);
        ExpectMatches(c, m, {Rand({8, t}, dt)});
        // The kernel holds no row length: it reads it from its parameters.
        const std::vector<std::string> sources = c.last_sources();
        ASSERT_EQ(sources.size(), 1u);
        EXPECT_NE(sources[0].find("row_n"), std::string::npos);
        if (t >= 100) {
          EXPECT_EQ(sources[0].find(std::to_string(t)), std::string::npos);
        }
        codegen::WaitForCompiles();
        EXPECT_EQ(codegen::NvrtcCompileCount(), compiles) << c.last_variants()[0];
      }
      EXPECT_EQ(c.stats().specializations, 2);
    }
  }
  (void)cache::RemoveTree(options.cache_dir);
}

TEST_F(CompiledModuleTest, DynamicBatchAndLengthKeepViewsOfANormFused) {
  for (const char* file : {"layernorm_heads_scripted.pt", "layernorm_heads_traced.pt",
                           "bias_residual_layernorm_scripted.pt", "rotary_scripted.pt"}) {
    SCOPED_TRACE(file);
    torch::jit::Module m = Load(file);
    CompiledModule c = Compile(m);
    if (std::string(file).rfind("layernorm_heads", 0) == 0) {
      for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 8}, {3, 16}, {1, 1}, {4, 7}, {2, 1000}}) {
        SCOPED_TRACE(::testing::Message() << b << "x" << t);
        ExpectMatches(c, m, {Rand({b, t, 1024})});
        EXPECT_EQ(c.last_call_stats().torch_ops, 0);
      }
    } else if (std::string(file).rfind("bias_residual", 0) == 0) {
      for (int64_t rows : {8, 24, 1, 1000, 7}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows");
        ExpectMatches(c, m, {Rand({rows, 1024}), Rand({rows, 1024})});
        EXPECT_EQ(c.last_call_stats().torch_ops, 0);
      }
    } else {
      for (auto [b, h] : {std::pair<int64_t, int64_t>{2, 4}, {3, 5}, {1, 1}, {7, 2}}) {
        ExpectMatches(c, m, {Rand({b, h, 64, 64})});
        EXPECT_EQ(c.last_call_stats().torch_ops, 0);
      }
    }
    EXPECT_EQ(c.stats().specializations, 2) << c.last_graph();
    EXPECT_EQ(c.stats().eager_calls, 0);
  }
}

TEST_F(CompiledModuleTest, AGraphThatSlicesFromADynamicSizeCompilesPerShapeAndWarns) {
  // The mask's last T rows: where the slice starts depends on T, so each shape compiles.
  torch::jit::Module m = Load("end_aligned_mask_softmax_scripted.pt");
  CompiledModule c = Compile(m);
  // Torch's default warning handler writes to stderr.
  ::testing::internal::CaptureStderr();
  for (int64_t t : {64, 32, 17}) {
    ExpectMatches(c, m, {Rand({2, t, t})});
    EXPECT_EQ(c.last_call_stats().fused_launches, 1);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.stats().specializations, 3);
  EXPECT_EQ(c.stats().eager_calls, 0);
  const std::string warning = "compiling once per input shape, not for dynamic sizes";
  const size_t at = err.find(warning);
  ASSERT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find(warning, at + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_NE(err.find("aten::", at + warning.size()), std::string::npos) << err;  // the node
}

// Cut to the length from its start, the same mask is one plan for every length after the
// first two shapes (the first compiles for its own shape).
TEST_F(CompiledModuleTest, AGraphThatSlicesToADynamicSizeCompilesOneDynamicPlan) {
  torch::jit::Module m = Load("masked_softmax_scripted.pt");
  CompiledModule c = Compile(m);
  for (int64_t t : {64, 32, 17, 1, 128}) {
    ExpectMatches(c, m, {Rand({2, t, t})});
    EXPECT_EQ(c.last_call_stats().fused_launches, 1);
  }
  EXPECT_EQ(c.stats().specializations, 2) << c.last_graph();
  EXPECT_EQ(c.stats().eager_calls, 0);
}

// Declared dynamic dims (torch.compile's): the first call compiles the one plan, through a
// view that joins B and T for a product, arange(T) run by torch with each call's T, and a
// reshape by B*T. (Scripted: the traced module makes its positions on the CPU it was traced on.)
TEST_F(CompiledModuleTest, DeclaredDynamicSizesCompileOnePlanThroughJoinedViewsAndFactories) {
  for (const char* file : {"linear_positions_scripted.pt"}) {
    SCOPED_TRACE(file);
    torch::jit::Module m = Load(file);
    Options options;
    options.input_specs = {"f32[B,T,64]"};
    CompiledModule c = Compile(m, options);
    for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 8}, {3, 17}, {1, 1}, {4, 1000}, {2, 7},
                        {1, 1023}}) {
      SCOPED_TRACE(::testing::Message() << b << "x" << t);
      ExpectMatches(c, m, {Rand({b, t, 64})});
      EXPECT_EQ(c.last_call_stats().eager_calls, 0);
      EXPECT_GE(c.last_call_stats().fused_launches, 2);  // the norm, the softmax
    }
    EXPECT_EQ(c.stats().specializations, 1) << c.last_graph();
    EXPECT_NE(c.last_graph().find("B*T"), std::string::npos) << c.last_graph();
  }
}

// A causal mask buffer cut to the sequence length: one plan for every length up to the
// buffer's, and a length past it an exception that says so (eager fails there too).
TEST_F(CompiledModuleTest, BuffersCutToADynamicLengthCompileOnePlan) {
  torch::jit::Module m = Load("masked_softmax_scripted.pt");
  Options options;
  options.input_specs = {"f32[2,T,T]"};
  CompiledModule c = Compile(m, options);
  for (int64_t t : {64, 1, 7, 100, 128, 33}) {
    SCOPED_TRACE(t);
    ExpectMatches(c, m, {Rand({2, t, t})});
    EXPECT_EQ(c.last_call_stats().eager_calls, 0);
    EXPECT_EQ(c.last_call_stats().fused_launches, 1);
  }
  EXPECT_EQ(c.stats().specializations, 1) << c.last_graph();
  EXPECT_NE(c.last_graph().find("end=T"), std::string::npos) << c.last_graph();
  try {
    c.forward({Rand({2, 129, 129})});
    ADD_FAILURE() << "a length past the buffer ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("past the 128"), std::string::npos) << e.what();
  }
}

TEST_F(CompiledModuleTest, DynamicShapesOffCompilesEveryShape) {
  torch::jit::Module m = Load("softmax_scripted.pt");
  Options options;
  options.dynamic_shapes = false;
  CompiledModule c = Compile(m, options);
  for (int64_t t : {64, 32, 17}) ExpectMatches(c, m, {Rand({2, t})});
  EXPECT_EQ(c.stats().specializations, 3);
  EXPECT_NE(c.last_graph().find("f32[2,17]"), std::string::npos) << c.last_graph();
}

TEST_F(CompiledModuleTest, UnsupportedOpInTheMiddleRunsThroughTorch) {
  torch::jit::Module m = Load("mixed_scripted.pt");
  CompiledModule c = Compile(m);
  ExpectMatches(c, m, {Rand({16, 1024})});
  EXPECT_GE(c.last_call_stats().fused_launches, 2);
  EXPECT_GE(c.last_call_stats().torch_ops, 1);  // cumsum (and the reductions, for now)
}

TEST_F(CompiledModuleTest, TupleOutputsAndLayoutOps) {
  torch::jit::Module two = Load("two_outputs_traced.pt");
  CompiledModule c2 = Compile(two);
  ExpectMatches(c2, two, {Rand({8, 1024})});
  EXPECT_EQ(c2.last_call_stats().fused_launches, 1);
  torch::jit::Module layout = Load("layout_scripted.pt");
  CompiledModule cl = Compile(layout);
  ExpectMatches(cl, layout, {Rand({8, 4}), Rand({8})});
}

TEST_F(CompiledModuleTest, GroupThatCannotBeCompiledRunsThroughTorch) {
  // The emitter has no integer clamp: that group must run unfused, with the right answer.
  torch::jit::Module m("IntClamp");
  m.define(R"(
def forward(self, x):
    return torch.clamp(x * 3, min=-4, max=5) + 1
)");
  m.eval();
  CompiledModule c = Compile(m);
  at::Tensor x = at::randint(-8, 8, {64, 32}, at::TensorOptions().device(at::kCUDA).dtype(at::kInt));
  ExpectMatches(c, m, {x});
  EXPECT_EQ(c.stats().unfused_groups, 1);
  EXPECT_EQ(c.last_call_stats().fused_launches, 0);
  ExpectMatches(c, m, {x});  // and again, without retrying the compile
  EXPECT_EQ(c.stats().unfused_groups, 1);
}

TEST_F(CompiledModuleTest, SpecializationLimitFallsBackToEager) {
  torch::jit::Module m = Load("gelu_scripted.pt");
  Options options;
  options.max_specializations = 1;
  CompiledModule c = Compile(m, options);
  ExpectMatches(c, m, {Rand({8, 64})});
  ExpectMatches(c, m, {Rand({9, 64})});
  EXPECT_EQ(c.last_call_stats().eager_calls, 1);
  EXPECT_EQ(c.stats().specializations, 1);
}

// Runs on CPU too: CPU inputs run the original module.
TEST_F(CompiledModuleTest, SlicesChunksAndSelectsAreReadInsideOneKernel) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module swiglu = Load("swiglu_scripted.pt", dtype);
    CompiledModule compiled = Compile(swiglu);
    // Even and odd halves: odd ones move the second slice off 16-byte alignment.
    for (int64_t half : {int64_t{11008}, int64_t{1001}}) {
      ExpectMatches(compiled, swiglu, {Rand({64, 2 * half}, dtype)});
      EXPECT_EQ(compiled.last_call_stats().fused_launches, 1);
      EXPECT_EQ(compiled.last_call_stats().torch_ops, 0);
    }
    // A strided input: the slices' offsets follow its strides.
    ExpectMatches(compiled, swiglu, {Rand({96, 64}, dtype).t()});
  }
  torch::jit::Module slices = Load("slice_select_scripted.pt");
  CompiledModule compiled = Compile(slices);
  ExpectMatches(compiled, slices, {Rand({8, 64})});
  EXPECT_EQ(compiled.last_call_stats().fused_launches, 1);
  EXPECT_EQ(compiled.last_call_stats().torch_ops, 0);
}

TEST_F(CompiledModuleTest, CatsStacksAndCopiesOfPermutedViewsAreOneKernel) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module rotary = Load("rotary_scripted.pt", dtype);
    CompiledModule compiled = Compile(rotary);
    for (int64_t t : {int64_t{64}, int64_t{100}, int64_t{7}}) {
      ExpectMatches(compiled, rotary, {Rand({2, 4, t, 64}, dtype)});
      EXPECT_EQ(compiled.last_call_stats().fused_launches, 1);
      EXPECT_EQ(compiled.last_call_stats().torch_ops, 0);
    }
    // Strided input: the halves' offsets follow its strides.
    ExpectMatches(compiled, rotary, {Rand({2, 64, 4, 64}, dtype).transpose(1, 2)});
    torch::jit::Module cats = Load("cat_stack_scripted.pt", dtype);
    CompiledModule cat_compiled = Compile(cats);
    // Widths 64 (vector loads on both sides of each boundary) and 37 (boundaries off them).
    for (int64_t w : {int64_t{64}, int64_t{37}}) {
      ExpectMatches(cat_compiled, cats, {Rand({8, w}, dtype)});
      EXPECT_EQ(cat_compiled.last_call_stats().fused_launches, 1);
      EXPECT_EQ(cat_compiled.last_call_stats().torch_ops, 0);
    }
    torch::jit::Module copy = Load("transpose_copy_scripted.pt", dtype);
    CompiledModule copy_compiled = Compile(copy);
    ExpectMatches(copy_compiled, copy, {Rand({2, 64, 4, 32}, dtype)});
    EXPECT_EQ(copy_compiled.last_call_stats().fused_launches, 1);
  }
}

TEST_F(CompiledModuleTest, RolledWindowsMatchEagerWithoutTorchRolls) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module m = Load("window_shift_scripted.pt", dtype);
    CompiledModule compiled = Compile(m);
    // Channel widths on and off vector loads (the width becomes a dynamic size: a roll of it
    // by 0 is a copy); the flattened roll is torch's.
    for (int64_t c : {int64_t{16}, int64_t{96}, int64_t{7}}) {
      SCOPED_TRACE(c);
      ExpectMatches(compiled, m, {Rand({2, 8, 12, c}, dtype)});
      EXPECT_EQ(compiled.last_call_stats().torch_ops, 1) << compiled.last_graph();
      // The roll before the window partition (a reshape that splits the rolled dims) is one
      // kernel, the windows' sigmoid another; the inverse roll reads in the residual add's.
      EXPECT_EQ(compiled.last_call_stats().fused_launches, 3) << compiled.last_graph();
    }
  }
}

TEST_F(CompiledModuleTest, RowsOffVectorAlignmentStoreVectorsAndMatchEager) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(at::toString(dtype));
    torch::jit::Module m = Load("padded_rows_scripted.pt", dtype);
    CompiledModule compiled = Compile(m);
    const std::string vector = dtype == at::kFloat ? "_v4_" : "_v8_";
    // Rows of 49 padded to 56 and rows of 64 rotated by 3: each output row is whole vectors,
    // no input row starts on one, and the cat boundaries (49, 61) split vectors. The permuted
    // table (strided) is read per element too where each of its elements serves 8 outputs or
    // more (batch 16), and keeps the padding's kernel scalar where it does not (batch 1).
    for (int64_t batch : {int64_t{16}, int64_t{1}}) {
      SCOPED_TRACE(batch);
      ExpectMatches(compiled, m,
                    {Rand({batch, 3, 49, 49}, dtype), Rand({49, 49, 3}, dtype).permute({2, 0, 1}),
                     Rand({8 * batch, 64}, dtype)});
      EXPECT_EQ(compiled.last_call_stats().torch_ops, 0) << compiled.last_graph();
      const std::vector<std::string> kernels = compiled.last_kernels();
      ASSERT_EQ(kernels.size(), 2u);
      for (const std::string& k : kernels) {
        const bool padding = k.find("cat_mul") == std::string::npos;
        const bool vectors = k.find(vector) != std::string::npos;
        EXPECT_EQ(vectors, !padding || batch == 16) << k;
      }
    }
  }
}

TEST_F(CompiledModuleTest, MaskedSoftmaxWithASlicedCausalMaskIsOneKernel) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    torch::jit::Module m = Load("masked_softmax_scripted.pt");
    CompiledModule compiled = Compile(m);
    for (int64_t t : {int64_t{64}, int64_t{100}, int64_t{7}}) {
      ExpectMatches(compiled, m, {Rand({3, t, t}, dtype)});
      EXPECT_EQ(compiled.last_call_stats().fused_launches, 1);
    }
  }
}

TEST(CompiledModuleCpuTest, CpuInputsRunEagerly) {
  auto m = frontend::LoadModule(ModelPath("bias_gelu_scripted.pt"));
  ASSERT_TRUE(m.ok());
  m->eval();
  CompiledModule c = Compile(*m);
  at::Tensor x = at::randn({4, 1024});
  at::Tensor got = c.forward({x}).toTensor();
  at::Tensor want = m->forward({x}).toTensor();
  EXPECT_TRUE(at::allclose(got, want));
  EXPECT_EQ(c.last_call_stats().eager_calls, 1);
  EXPECT_EQ(c.stats().specializations, 0);
}

}  // namespace
}  // namespace torchfuse
