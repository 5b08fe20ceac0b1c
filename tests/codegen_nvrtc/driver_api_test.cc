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

// A kernel that keeps a row in shared memory takes more than the 48 KiB a launch gets
// without opting in: Load opts in to what the kernel takes, and Launch passes it.
TEST(DriverApiTest, KernelsTakeDynamicSharedMemoryAbove48KiB) {
  auto api = GetDriverApi();
  if (!api.ok()) GTEST_SKIP() << "no CUDA driver";
  auto info = GetDeviceInfo(0);
  ASSERT_TRUE(info.ok());
  constexpr int kBytes = 96 * 1024;
  auto image = CompileCuda(
      "extern \"C\" __global__ void k(int* out) {\n"
      "  extern __shared__ int s[];\n"
      "  const int n = 96 * 1024 / 4;\n"
      "  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = 3 * i + 1;\n"
      "  __syncthreads();\n"
      "  if (threadIdx.x == 0) out[0] = s[n - 1] + s[n / 2];\n"
      "}\n",
      "k", info->arch);
  ASSERT_TRUE(image.ok()) << image.status();
  auto kernel = LoadedKernel::Load(*image, "k", 0, kBytes);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  CUdeviceptr out = 0;
  ASSERT_EQ((*api)->cuMemAlloc(&out, sizeof(int)), CUDA_SUCCESS);
  void* args[] = {&out};
  ASSERT_TRUE((*kernel)->Launch(1, 256, args, nullptr).ok());
  int got = 0;
  ASSERT_EQ((*api)->cuMemcpyDtoH(&got, out, sizeof(int)), CUDA_SUCCESS);
  const int n = kBytes / 4;
  EXPECT_EQ(got, 3 * (n - 1) + 1 + 3 * (n / 2) + 1);
  (*api)->cuMemFree(out);
}

}  // namespace
}  // namespace torchfuse::codegen
