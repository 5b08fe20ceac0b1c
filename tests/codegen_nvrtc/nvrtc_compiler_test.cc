#include "codegen_nvrtc/nvrtc_compiler.h"

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "codegen_nvrtc/compile_pool.h"

namespace torchfuse::codegen {
namespace {

constexpr char kGood[] = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n";

TEST(NvrtcCompilerTest, ParsesArchNames) {
  EXPECT_EQ(*ParseArch("sm_90"), 90);
  EXPECT_EQ(*ParseArch("sm_90a"), 90);
  EXPECT_EQ(*ParseArch("80"), 80);
  EXPECT_FALSE(ParseArch("sm_x").ok());
  EXPECT_FALSE(ParseArch("gfx90a").ok());
}

TEST(NvrtcCompilerTest, CompilesCubinAndCounts) {
  const int64_t before = NvrtcCompileCount();
  auto image = CompileCuda(kGood, "k", 90);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_FALSE(image->is_ptx);
  // An ELF cubin.
  ASSERT_GT(image->data.size(), 4u);
  EXPECT_EQ(image->data[1], 'E');
  EXPECT_EQ(image->data[2], 'L');
  EXPECT_EQ(NvrtcCompileCount(), before + 1);
}

TEST(NvrtcCompilerTest, FallsBackToPtxForArchsNvrtcDoesNotKnow) {
  std::vector<int> archs = NvrtcSupportedArchs();
  ASSERT_FALSE(archs.empty());
  auto image = CompileCuda(kGood, "k", archs.back() + 1);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(image->is_ptx);
  EXPECT_EQ(image->arch, archs.back());
  EXPECT_NE(std::string(image->data.data()).find(".entry k"), std::string::npos);
}

TEST(NvrtcCompilerTest, FailureCarriesLogAndDumpedSource) {
  auto image = CompileCuda("extern \"C\" __global__ void k() { undefined_thing(); }\n",
                           "tf_broken_kernel", 90);
  ASSERT_FALSE(image.ok());
  const std::string msg(image.status().message());
  EXPECT_NE(msg.find("undefined_thing"), std::string::npos) << msg;
  const size_t at = msg.find("source dumped to ");
  ASSERT_NE(at, std::string::npos) << msg;
  const std::string path = msg.substr(at + std::string("source dumped to ").size());
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
}

TEST(NvrtcCompilerTest, WarmUpIsNotACompile) {
  const int64_t before = NvrtcCompileCount();
  EXPECT_GE(WarmNvrtcHere(90), 0);
  EXPECT_GE(WarmNvrtcHere(/*arch=*/0), 0);  // NVRTC's newest arch
  EXPECT_EQ(NvrtcCompileCount(), before);
}

// One test, in this order: the warm-up is once per process.
TEST(NvrtcCompilerTest, PrepareCompilesWarmsOnAPoolThreadOncePerProcess) {
  ::unsetenv("TORCHFUSE_COMPILE_WORKERS");  // in this process, not in worker processes
  const int64_t before = NvrtcCompileCount();
  ::setenv("TORCHFUSE_WARM_NVRTC", "0", 1);
  PrepareCompiles(90);
  EXPECT_EQ(PendingCompiles(), 0);
  EXPECT_EQ(NvrtcWarmupMs(), -1);
  ::unsetenv("TORCHFUSE_WARM_NVRTC");
  PrepareCompiles(90);
  WaitForCompiles();
  EXPECT_GE(NvrtcWarmupMs(), 0);
  PrepareCompiles(90);  // done already: queues nothing
  EXPECT_EQ(PendingCompiles(), 0);
  EXPECT_EQ(NvrtcCompileCount(), before);
}

TEST(NvrtcCompilerTest, ReportsVersion) { EXPECT_GE(NvrtcVersion(), 11000); }

}  // namespace
}  // namespace torchfuse::codegen
