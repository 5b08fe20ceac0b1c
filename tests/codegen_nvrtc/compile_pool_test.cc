#include "codegen_nvrtc/compile_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {
namespace {

codegen::KernelSource Kernel(int i) {
  codegen::KernelSource k;
  k.name = "k" + std::to_string(i);
  k.source = "extern \"C\" __global__ void " + k.name +
             "(float* x) {\n#pragma unroll 64\n  for (int j = 0; j < 4096; ++j) x[j] = "
             "__expf(x[j] * " + std::to_string(i) + ".0f) + sqrtf(x[j]);\n}\n";
  return k;
}

TEST(CompilePoolTest, RunsEveryJobUrgentOnesFirstAndWaits) {
  std::atomic<int> done{0};
  for (int i = 0; i < 6; ++i) SubmitCompile([&] { done.fetch_add(1); });
  WaitForCompiles();
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(PendingCompiles(), 0);
}

TEST(CompilePoolTest, ConcurrentWantsOfOneKernelCompileItOnce) {
  codegen::ResetProcessKernelCache();
  const codegen::KernelSource k = Kernel(1000);
  const int64_t before = codegen::NvrtcCompileCount();
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    SubmitCompile([&] { ok.fetch_add(codegen::GetOrCompile(k, 90, nullptr).ok()); });
  }
  EXPECT_TRUE(codegen::GetOrCompile(k, 90, nullptr).ok());
  WaitForCompiles();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(codegen::NvrtcCompileCount() - before, 1);
}

// The process exits while background compiles are in flight and queued: it must exit
// cleanly (ctest reports a crash at exit as a failure of this test).
TEST(CompilePoolTest, ExitWithCompilesInFlight) {
  for (int i = 0; i < 16; ++i) {
    SubmitCompile([k = Kernel(i)] { (void)codegen::GetOrCompile(k, 90, nullptr); });
  }
  EXPECT_GT(PendingCompiles(), 0);
}

}  // namespace
}  // namespace torchfuse::codegen
