#include "codegen_nvrtc/driver_api.h"

#include <gtest/gtest.h>

namespace torchfuse::codegen {
namespace {

// Loading the driver never crashes: without one it is Unavailable, with one it reports the GPU.
TEST(DriverApiTest, LoadsAtRunTimeOrSaysWhyNot) {
  auto api = GetDriverApi();
  if (!api.ok()) {
    EXPECT_EQ(api.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(std::string(api.status().message()).find("libcuda"), std::string::npos)
        << api.status();
    EXPECT_FALSE(GetDeviceInfo(0).ok());
    GTEST_SKIP() << "no CUDA driver: " << api.status();
  }
  auto info = GetDeviceInfo(0);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GE(info->arch, 50);
  EXPECT_GT(info->multiprocessors, 0);
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->driver_version, 0);
}

TEST(DriverApiTest, LoadsAndLaunchesAKernel) {
  auto api = GetDriverApi();
  if (!api.ok()) GTEST_SKIP() << "no CUDA driver";
  auto info = GetDeviceInfo(0);
  ASSERT_TRUE(info.ok());
  auto image = CompileCuda("extern \"C\" __global__ void k(int* x) { }\n", "k", info->arch);
  ASSERT_TRUE(image.ok()) << image.status();
  auto kernel = LoadedKernel::Load(*image, "k", 0);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  auto missing = LoadedKernel::Load(*image, "no_such_kernel", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("cuModuleGetFunction"), std::string::npos);
}

}  // namespace
}  // namespace torchfuse::codegen
