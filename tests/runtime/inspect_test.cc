#include "runtime/inspect.h"

#include <gtest/gtest.h>

#include "frontend_torch/model_source.h"
#include "frontend_torch/torchscript_importer.h"
#include "../frontend_torch/test_models.h"

namespace torchfuse {
namespace {

using testing::ModelPath;

const std::vector<graph::TensorType> kX = {{graph::DType::kF32, {64, 1024}}};

TEST(InspectTest, GeluIsOneKernelWithTanhAndCompiles) {
  for (const char* file : {"gelu_scripted.pt", "gelu_traced.pt"}) {
    auto r = InspectModel(ModelPath(file), kX, 90);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->kernels.size(), 1u) << file;
    const KernelReport& k = r->kernels[0];
    EXPECT_EQ(k.group, "gelu");
    EXPECT_NE(k.source.find("tf_tanh"), std::string::npos);
    EXPECT_TRUE(k.error.empty()) << k.error;
    EXPECT_GT(k.binary_size, 0);
    EXPECT_FALSE(k.is_ptx);
    EXPECT_NE(FormatReport(*r).find("aten::tanh"), std::string::npos);
  }
}

TEST(InspectTest, RowModelsAreOneKernelEach) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"softmax", "softmax"},       {"layernorm", "layer_norm"},
      {"rmsnorm", "rms_norm"},      {"torch_softmax", "softmax"},
      {"log_softmax", "log_softmax"}, {"f_layer_norm", "layer_norm"}};
  for (const auto& [model, group] : models) {
    for (const char* how : {"_scripted.pt", "_traced.pt"}) {
      const std::string file = model + how;
      auto r = InspectModel(ModelPath(file), kX, 90);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->kernels.size(), 1u) << file << "\n" << FormatReport(*r);
      EXPECT_EQ(r->opaque_nodes, 0) << file;
      EXPECT_EQ(r->kernels[0].group, group) << file;
      EXPECT_TRUE(r->kernels[0].error.empty()) << r->kernels[0].error;
      EXPECT_GT(r->kernels[0].binary_size, 0);
    }
  }
  auto r = InspectModel(ModelPath("bias_residual_layernorm_traced.pt"),
                        {{graph::DType::kF32, {64, 1024}}, {graph::DType::kF32, {64, 1024}}}, 90);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernels.size(), 1u) << FormatReport(*r);
}

// A bf16 MLP (linear, then GELU's tanh form written out) has no kernel of torchfuse's: each
// GELU is its product's cuBLASLt epilogue, and the explanation says so. With the option off,
// or in f32, each GELU is one kernel after its product.
TEST(InspectTest, HalfPrecisionMlpRunsEachGeluInItsProductsEpilogue) {
  auto inspect = [](at::ScalarType dtype, const Options& options) {
    auto m = frontend::LoadModule(ModelPath("mlp_traced.pt"));
    EXPECT_TRUE(m.ok()) << m.status();
    m->eval();
    m->to(dtype);
    auto source = frontend::ModelSource::FromModule(*m);
    EXPECT_TRUE(source.ok()) << source.status();
    const graph::DType dt = dtype == at::kFloat ? graph::DType::kF32 : graph::DType::kBF16;
    return InspectSource(*source, {{dt, {8, 256}}}, 90, false, options);
  };
  auto r = inspect(at::kBFloat16, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernels.size(), 0u) << FormatReport(*r);
  ASSERT_EQ(r->explanation.left.size(), 4u) << r->explanation.ToString();
  for (const LeftToTorch& l : r->explanation.left) {
    EXPECT_TRUE(l.expected);
    EXPECT_NE(l.why.find("GELU (tanh) in cuBLASLt's epilogue"), std::string::npos) << l.why;
  }
  EXPECT_NE(r->fused_graph.find("epilogue=\"gelu_tanh\""), std::string::npos);
  Options off;
  off.matmul_epilogues = false;
  auto apart = inspect(at::kBFloat16, off);
  ASSERT_TRUE(apart.ok()) << apart.status();
  EXPECT_EQ(apart->kernels.size(), 4u) << FormatReport(*apart);
  auto f32 = inspect(at::kFloat, {});
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->kernels.size(), 4u) << FormatReport(*f32);
}

TEST(InspectTest, LongBf16SoftmaxRowsAreOneKernel) {
  for (const char* file : {"softmax_traced.pt", "torch_softmax_scripted.pt"}) {
    auto r = InspectModel(ModelPath(file), {{graph::DType::kBF16, {8, 65536}}}, 90);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->kernels.size(), 2u) << FormatReport(*r);
    EXPECT_EQ(r->opaque_nodes, 0);
    for (const KernelReport& k : r->kernels) EXPECT_TRUE(k.error.empty()) << k.error;
  }
}

TEST(InspectTest, SourceIsDeterministic) {
  auto a = InspectModel(ModelPath("bias_gelu_scripted.pt"), kX, 90);
  auto b = InspectModel(ModelPath("bias_gelu_scripted.pt"), kX, 90);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->kernels.size(), 1u);
  EXPECT_EQ(a->kernels[0].source, b->kernels[0].source);
  EXPECT_EQ(a->kernels[0].group, "bias_gelu");
}

TEST(InspectTest, MlpHasFourKernelsAroundFourMatmuls) {
  auto r = InspectModel(ModelPath("mlp_scripted.pt"), {{graph::DType::kF32, {8, 256}}}, 90);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernels.size(), 4u);
  EXPECT_EQ(r->opaque_nodes, 4);
}

// Every kernel of every test model compiles for sm_80 and sm_90.
TEST(InspectTest, EveryModelsKernelsCompileForSm80AndSm90) {
  for (const testing::TestModel& m : testing::ReadManifest()) {
    for (int arch : {80, 90}) {
      auto r = InspectModel(m.path, m.inputs, arch);
      ASSERT_TRUE(r.ok()) << m.name << ": " << r.status();
      for (const KernelReport& k : r->kernels) {
        EXPECT_TRUE(k.error.empty()) << m.name << " " << k.kernel_name << ": " << k.error;
      }
    }
  }
}

TEST(InspectTest, UnsupportedOpInTheMiddleStillCompilesAround) {
  auto r = InspectModel(ModelPath("mixed_traced.pt"), kX, 90);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->kernels.size(), 2u);
  EXPECT_NE(r->fused_graph.find("aten::cumsum"), std::string::npos);
}

TEST(InspectTest, BadFilesAreErrorsNamingThePath) {
  auto garbage = InspectModel(ModelPath("not_a_model.pt"), kX, 90);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(std::string(garbage.status().message()).find("not_a_model.pt"), std::string::npos);
  auto missing = InspectModel("/no/such/model.pt", kX, 90);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("/no/such/model.pt"), std::string::npos);
}

TEST(InspectTest, ViewsAndIndexingFuseIntoOneKernelWithNothingLeftToTorch) {
  using graph::DType;
  const std::vector<std::pair<std::string, std::vector<graph::TensorType>>> models = {
      {"swiglu", {{DType::kBF16, {64, 2048}}}},
      {"masked_softmax", {{DType::kF32, {2, 64, 64}}}},
      {"gelu_transposed", {{DType::kF32, {64, 1024}}}},
      {"layernorm_heads", {{DType::kF32, {2, 8, 1024}}}},
      {"channels_last_norm", {{DType::kF32, {2, 32, 5, 6}}}},
      {"slice_select", {{DType::kF32, {8, 64}}}},
      {"rotary", {{DType::kF32, {2, 4, 64, 64}}}},
      {"cat_stack", {{DType::kF32, {8, 64}}}},
      {"transpose_copy", {{DType::kF32, {2, 64, 4, 32}}}},
      {"hard_activations", {{DType::kBF16, {64, 96}}}}};
  for (const auto& [model, inputs] : models) {
    for (const char* how : {"_scripted.pt", "_traced.pt"}) {
      const std::string file = model + how;
      auto r = InspectModel(ModelPath(file), inputs, 90);
      ASSERT_TRUE(r.ok()) << file << ": " << r.status();
      EXPECT_EQ(r->kernels.size(), 1u) << file << "\n" << FormatReport(*r);
      EXPECT_EQ(r->opaque_nodes, 0) << file;
      EXPECT_TRUE(r->explanation.left.empty()) << file << ": " << r->explanation.ToString();
      EXPECT_EQ(r->explanation.kernels, 1) << file;
      ASSERT_FALSE(r->kernels.empty());
      EXPECT_TRUE(r->kernels[0].error.empty()) << file << ": " << r->kernels[0].error;
      EXPECT_GT(r->kernels[0].binary_size, 0) << file;
    }
  }
}

TEST(InspectTest, ColumnReductionsAreOneKernelWithNothingLeftToTorch) {
  using graph::DType;
  const std::vector<std::pair<std::string, std::vector<graph::TensorType>>> models = {
      {"column_sum", {{DType::kF32, {4096, 1024}}}},
      {"product_column_sum", {{DType::kF32, {8, 512, 768}}, {DType::kF32, {8, 512, 768}}}},
      {"gelu_column_sum", {{DType::kF32, {4096, 1024}}, {DType::kF32, {4096, 1024}}}},
      {"gelu_column_sum", {{DType::kBF16, {8192, 768}}, {DType::kBF16, {8192, 768}}}}};
  for (const auto& [model, inputs] : models) {
    for (const char* how : {"_scripted.pt", "_traced.pt"}) {
      const std::string file = model + how;
      auto r = InspectModel(ModelPath(file), inputs, 90);
      ASSERT_TRUE(r.ok()) << file << ": " << r.status();
      EXPECT_EQ(r->kernels.size(), 1u) << file << "\n" << FormatReport(*r);
      EXPECT_EQ(r->opaque_nodes, 0) << file;
      EXPECT_TRUE(r->explanation.left.empty()) << file << ": " << r->explanation.ToString();
      ASSERT_FALSE(r->kernels.empty());
      EXPECT_NE(r->kernels[0].source.find("torchfuse column kernel"), std::string::npos) << file;
      EXPECT_TRUE(r->kernels[0].error.empty()) << file << ": " << r->kernels[0].error;
      EXPECT_GT(r->kernels[0].binary_size, 0) << file;
    }
  }
}

TEST(InspectTest, ExplanationNamesWhatTorchRuns) {
  auto r = InspectModel(ModelPath("mixed_scripted.pt"), kX, 90);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->explanation.left.size(), 1u) << r->explanation.ToString();
  EXPECT_EQ(r->explanation.left[0].op, "aten::cumsum");
  EXPECT_FALSE(r->explanation.left[0].expected);
  EXPECT_NE(r->explanation.WarningText().find("aten::cumsum"), std::string::npos);
  EXPECT_GT(r->explanation.fused_nodes, 0);
  EXPECT_LE(r->explanation.fused_nodes, r->explanation.nodes);
  EXPECT_NE(FormatReport(*r).find("explain: "), std::string::npos);
  auto mlp = InspectModel(ModelPath("mlp_scripted.pt"), {{graph::DType::kF32, {8, 256}}}, 90);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_TRUE(mlp->explanation.WarningText().empty()) << mlp->explanation.ToString();
  for (const LeftToTorch& l : mlp->explanation.left) EXPECT_TRUE(l.expected) << l.op;
}

// index_put with accumulate into f32 rows is torchfuse's scatter-add kernel, not a node left
// to torch; into bf16 rows (no kernel for them) and without accumulate, torch runs it.
TEST(InspectTest, ExplanationCountsScatterAddsAsKernels) {
  auto left_ops = [](const Explanation& e) {
    std::vector<std::string> ops;
    for (const LeftToTorch& l : e.left) ops.push_back(l.op);
    return ops;
  };
  for (const char* file : {"index_put_accumulate_scripted.pt", "index_put_accumulate_traced.pt"}) {
    auto f32 = InspectModel(ModelPath(file), {{graph::DType::kI64, {4, 16}},
                                              {graph::DType::kF32, {4, 16, 100}},
                                              {graph::DType::kF32, {1000, 100}}}, 90);
    ASSERT_TRUE(f32.ok()) << file << ": " << f32.status();
    EXPECT_EQ(f32->explanation.kernels, 2) << file << "\n" << f32->explanation.ToString();
    const std::vector<std::string> ops = left_ops(f32->explanation);
    EXPECT_EQ(std::count(ops.begin(), ops.end(), "aten::index_put"), 1) << file;  // no accumulate
    // The traced model's zeros_like keeps the dtype it was traced with (f32): bf16 inputs
    // would meet f32 rows, which neither torch nor the kernel adds into.
    if (std::string(file).find("traced") != std::string::npos) continue;
    auto bf16 = InspectModel(ModelPath(file), {{graph::DType::kI64, {4, 16}},
                                               {graph::DType::kBF16, {4, 16, 100}},
                                               {graph::DType::kBF16, {1000, 100}}}, 90);
    ASSERT_TRUE(bf16.ok()) << file << ": " << bf16.status();
    EXPECT_EQ(bf16->explanation.kernels, 0) << file << "\n" << bf16->explanation.ToString();
    const std::vector<std::string> bf16_ops = left_ops(bf16->explanation);
    EXPECT_EQ(std::count(bf16_ops.begin(), bf16_ops.end(), "aten::index_put"), 3) << file;
  }
}

}  // namespace
}  // namespace torchfuse
