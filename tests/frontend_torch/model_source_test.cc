#include "frontend_torch/model_source.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_models.h"

namespace torchfuse::frontend {
namespace {

// An op that throws while RunEager runs a loaded model (an f32 convolution given a bf16 image)
// is an exception that names the op, not a crash: the error's stack trace reads the inlined
// call stacks of the module the graph was frozen from, whose compilation unit the source
// keeps. The source runs again afterwards, and its copies throw the same way.
TEST(ModelSourceTest, AnOpThatThrowsInRunEagerIsAnExceptionNotACrash) {
  auto source = ModelSource::Load(testing::ModelPath("depthwise_convs_scripted.pt"));
  ASSERT_TRUE(source.ok()) << source.status();
  const at::Tensor image = at::randn({2, 32, 20, 18});
  for (const ModelSource& s : {*source, source->To(at::kCPU), source->InDouble()}) {
    std::vector<c10::IValue> wrong = {image.to(at::kBFloat16)};
    try {
      s.RunEager(wrong);
      ADD_FAILURE() << "an f32 convolution of a bf16 image ran";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("conv2d"), std::string::npos) << e.what();
    }
  }
  std::vector<c10::IValue> right = {image};
  const at::Tensor out = source->RunEager(right).toTensor();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 16, 10, 9}));
  EXPECT_GT(out.abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace torchfuse::frontend
