// Runs the torchfuse program as a user would.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "../frontend_torch/test_models.h"

namespace torchfuse {
namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr
};

Result RunCli(const std::string& args) {
  const std::string cmd = std::string(TF_TORCHFUSE_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

std::string Model(const char* file) { return testing::ModelPath(file); }

int CountOccurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(TorchfuseCliTest, HelpListsCommands) {
  Result r = RunCli("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("inspect"), std::string::npos);
  EXPECT_NE(r.out.find("run"), std::string::npos);
}

TEST(TorchfuseCliTest, InspectShowsOneGeluKernelForScriptedAndTraced) {
  for (const char* f : {"gelu_scripted.pt", "gelu_traced.pt"}) {
    Result r = RunCli("inspect " + Model(f) + " --input f32[64,1024] --arch sm_90");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("== fusion groups: 1 kernel(s)"), std::string::npos) << r.out;
    EXPECT_EQ(CountOccurrences(r.out, "extern \"C\" __global__"), 1);
    EXPECT_NE(r.out.find("tf_tanh("), std::string::npos);
    EXPECT_NE(r.out.find("compiled with NVRTC for sm_90: cubin"), std::string::npos);
  }
}

TEST(TorchfuseCliTest, InspectBiasGeluAndMlp) {
  Result bias = RunCli("inspect " + Model("bias_gelu_traced.pt") + " --input f32[64,1024] --arch sm_90");
  ASSERT_EQ(bias.exit_code, 0) << bias.out;
  EXPECT_NE(bias.out.find("== fusion groups: 1 kernel(s)"), std::string::npos);
  Result mlp = RunCli("inspect " + Model("mlp_scripted.pt") + " --input f32[8,256] --arch sm_90");
  ASSERT_EQ(mlp.exit_code, 0) << mlp.out;
  EXPECT_NE(mlp.out.find("== fusion groups: 4 kernel(s), 4 node(s) run by torch"), std::string::npos)
      << mlp.out;
}

TEST(TorchfuseCliTest, InspectCompilesAroundUnsupportedOps) {
  Result r = RunCli("inspect " + Model("mixed_scripted.pt") + " --input f32[8,1024] --arch sm_80");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("aten::cumsum"), std::string::npos);
}

TEST(TorchfuseCliTest, GarbageAndMissingFilesFailWithOneLineNamingThePath) {
  const std::string garbage = Model("not_a_model.pt");
  Result r = RunCli("inspect " + garbage + " --input f32[8,8] --arch sm_90");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(CountOccurrences(r.out, "\n"), 1) << r.out;
  EXPECT_NE(r.out.find(garbage), std::string::npos) << r.out;
  Result missing = RunCli("inspect /no/such.pt --input f32[8,8] --arch sm_90");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.out.find("/no/such.pt"), std::string::npos);
}

TEST(TorchfuseCliTest, BadArgumentsAreOneLineErrors) {
  for (const char* args : {"inspect m.pt --input f32[8,x]", "inspect m.pt --input q9[8]",
                           "frobnicate", "inspect m.pt", "inspect m.pt --input f32[8] --arch gfx9",
                           ""}) {
    Result r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(CountOccurrences(r.out, "\n"), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("torchfuse: ", 0), 0u) << r.out;
  }
}

}  // namespace
}  // namespace torchfuse
