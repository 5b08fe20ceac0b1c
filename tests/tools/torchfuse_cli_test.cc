// Runs the torchfuse program as a user would.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <sys/stat.h>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <set>
#include <string>

#include "cache/files.h"
#include "nlohmann/json.hpp"
#include "../frontend_torch/test_models.h"
#include "../support/text.h"

namespace torchfuse {
namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr
};

// Runs `torchfuse args`, with `env` ("NAME=value ...") before it when given; `out` has stdout
// and stderr, or stdout only.
Result RunCli(const std::string& args, const std::string& env = "", bool stdout_only = false) {
  const std::string cmd =
      env + std::string(TF_TORCHFUSE_BIN) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

std::string Model(const char* file) { return testing::ModelPath(file); }

using ::torchfuse::test_support::CountOccurrences;

TEST(TorchfuseCliTest, HelpListsCommands) {
  Result r = RunCli("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("inspect"), std::string::npos);
  EXPECT_NE(r.out.find("run"), std::string::npos);
  EXPECT_NE(r.out.find("precompile"), std::string::npos);
  EXPECT_NE(r.out.find("cache path|ls|clear|rebuild"), std::string::npos);
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

// The report says how long each kernel's NVRTC compile took, and that a later process read the
// binary from the disk cache instead; the JSON report has the same as compile_ms (null there).
TEST(TorchfuseCliTest, InspectSaysWhatEachCompileTookOrThatTheCacheHadIt) {
  const std::string cache =
      ::testing::TempDir() + "/inspect-compile-ms-" + std::to_string(::getpid());
  const std::string args = "inspect " + Model("gelu_traced.pt") +
                           " --input f32[64,1024] --arch sm_90 --cache-dir " + cache;
  // The line that reports the kernel's binary.
  auto compiled_line = [](const std::string& out) {
    const size_t at = out.find("compiled with NVRTC for sm_90: cubin, ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  RunCli("cache clear --cache-dir " + cache);
  Result first = RunCli(args);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  std::string line = compiled_line(first.out);
  EXPECT_NE(line.find(" bytes in "), std::string::npos) << first.out;
  ASSERT_GT(line.size(), 3u) << first.out;
  EXPECT_EQ(line.substr(line.size() - 3), " ms") << line;
  // A new process finds the binary on disk.
  Result second = RunCli(args);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  line = compiled_line(second.out);
  EXPECT_NE(line.find(" bytes (read from the cache)"), std::string::npos) << second.out;
  EXPECT_EQ(line.find(" ms"), std::string::npos) << line;
  Result cached = RunCli(args + " --json", "", true);
  ASSERT_EQ(cached.exit_code, 0) << cached.out;
  EXPECT_TRUE(nlohmann::json::parse(cached.out)["kernels"][0]["compile_ms"].is_null());
  RunCli("cache clear --cache-dir " + cache);
  Result fresh = RunCli(args + " --json", "", true);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out;
  const nlohmann::json kernel = nlohmann::json::parse(fresh.out)["kernels"][0];
  ASSERT_TRUE(kernel["compile_ms"].is_number()) << kernel.dump();
  EXPECT_GT(kernel["compile_ms"].get<double>(), 0.0);
}

// A forced staged row variant (the row kept in shared memory) says what shared memory its
// blocks take, in the text and in the JSON report.
TEST(TorchfuseCliTest, InspectOfAStagedRowVariantShowsItsSharedMemory) {
  const std::string args =
      "inspect " + Model("softmax_scripted.pt") + " --input bf16[64,8192] --arch sm_90";
  Result r = RunCli(args, "TORCHFUSE_ROW_STRATEGY=looped_t256_u2_sm ");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("looped_t256_u2_sm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; 16384 bytes of dynamic shared memory a block"), std::string::npos)
      << r.out;
  Result json = RunCli(args + " --json", "TORCHFUSE_ROW_STRATEGY=looped_t256_u2_sm ", true);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const nlohmann::json doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["kernels"][0]["dynamic_shared_bytes"], 16384);
  Result plain = RunCli(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.out.find("dynamic shared memory"), std::string::npos) << plain.out;
}

TEST(TorchfuseCliTest, InspectOfDynamicSizesPrintsOneKernelForEveryRowLength) {
  for (const char* spec : {"f32[B,T]", "f32[?,?]", "bf16[8,T]"}) {
    SCOPED_TRACE(spec);
    Result r = RunCli("inspect " + Model("softmax_scripted.pt") + " --input '" + spec +
                      "' --arch sm_90");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("== fusion groups: 1 kernel(s), 0 node(s) run by torch"),
              std::string::npos) << r.out;
    EXPECT_EQ(CountOccurrences(r.out, "extern \"C\" __global__"), 1);
    // The row length is a kernel parameter; no size of the model is in the source.
    EXPECT_NE(r.out.find("const int row_n = p.v["), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("row length a parameter"), std::string::npos);
    EXPECT_NE(r.out.find("compiled with NVRTC for sm_90: cubin"), std::string::npos);
  }
  // precompile takes the same specs: the kernel for rows of any length goes into the cache.
  const std::string cache = ::testing::TempDir() + "/dynamic-precompile-cache";
  Result p = RunCli("precompile " + Model("softmax_scripted.pt") +
                    " --input 'f32[B,T]' --arch sm_90 --cache-dir " + cache);
  ASSERT_EQ(p.exit_code, 0) << p.out;
  EXPECT_NE(p.out.find("1 kernel"), std::string::npos) << p.out;
  // A mask buffer cut to the dynamic length stays two views; the softmax is one kernel.
  Result masked = RunCli("inspect " + Model("masked_softmax_scripted.pt") +
                         " --input 'f32[2,T,T]' --arch sm_90");
  ASSERT_EQ(masked.exit_code, 0) << masked.out;
  EXPECT_NE(masked.out.find("9 fused into 1 kernel(s), 2 view(s), 0 node(s) run by torch"),
            std::string::npos) << masked.out;
  EXPECT_NE(masked.out.find("const int row_n = p.v["), std::string::npos) << masked.out;
  // Bounds that depend on the size in other ways are refused with the node named.
  Result shifted = RunCli("inspect " + Model("masked_softmax_scripted.pt") +
                          " --input 'f32[2,T,S]' --arch sm_90");
  EXPECT_NE(shifted.exit_code, 0) << shifted.out;
  EXPECT_NE(shifted.out.find("aten::"), std::string::npos) << shifted.out;
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
                           "", "cache", "cache frob", "precompile m.pt",
                           "precompile m.pt --input f32[8] --tune-budget-ms x"}) {
    Result r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(CountOccurrences(r.out, "\n"), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("torchfuse: ", 0), 0u) << r.out;
  }
}

TEST(TorchfuseCliTest, EveryCommandHasItsOwnHelp) {
  const std::pair<const char*, const char*> cases[] = {
      {"run", "usage: torchfuse run MODEL"},
      {"inspect", "usage: torchfuse inspect MODEL"},
      {"precompile", "usage: torchfuse precompile MODEL"},
      {"cache", "usage: torchfuse cache path|ls|clear|rebuild"}};
  for (const auto& [command, usage] : cases) {
    for (const std::string flag : {" --help", " -h"}) {
      Result r = RunCli(command + flag);
      EXPECT_EQ(r.exit_code, 0) << command;
      EXPECT_EQ(r.out.rfind(usage, 0), 0u) << r.out;
      EXPECT_NE(r.out.find("--cache-dir"), std::string::npos) << r.out;
    }
  }
  // Help wins over missing arguments.
  EXPECT_EQ(RunCli("run --help --input f32[8,x]").exit_code, 0);
}

TEST(TorchfuseCliTest, RunRejectsBadSpecsAndMissingFilesBeforeAnyGpuWork) {
  for (const char* args : {"run m.pt --input f32[8,x]", "run m.pt", "run", "run m.pt --input f32[8] --iters 0",
                           "run /no/such.pt --input f32[8]", "run /no/such.pt2 --input f32[8]"}) {
    Result r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(CountOccurrences(r.out, "\n"), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("torchfuse: ", 0), 0u) << r.out;
  }
  EXPECT_NE(RunCli("run m.pt --input f32[8,x]").out.find("f32[8,x]"), std::string::npos);
}

TEST(TorchfuseCliTest, InspectReadsTorchExportArchives) {
  const std::string pt2 = std::string(TF_SOURCE_DIR) + "/tests/data/mlp_block.pt2";
  Result r = RunCli("inspect " + pt2 + " --input f32[4,16] --arch sm_90");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // linear stays with cuBLAS; GeLU, LayerNorm and softmax are one row kernel.
  EXPECT_NE(r.out.find("== fusion groups: 1 kernel(s), 1 node(s) run by torch"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("aten::tanh"), std::string::npos);
  EXPECT_NE(r.out.find("aten::layer_norm"), std::string::npos);
  EXPECT_NE(r.out.find("tuning:"), std::string::npos);
}

TEST(TorchfuseCliTest, RunChecksTorchExportArchivesAgainstEager) {
  const std::string pt2 = std::string(TF_SOURCE_DIR) + "/tests/data/mlp_block.pt2";
  Result r = RunCli("run " + pt2 + " --input f32[64,16] --iters 5");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  if (!torch::cuda::is_available()) {
    EXPECT_NE(r.out.find("no CUDA device: skipped execution"), std::string::npos) << r.out;
    return;
  }
  // One fused kernel (GeLU, LayerNorm, softmax) and the matmul, matching eager.
  EXPECT_NE(r.out.find("1 fused kernel(s) and 1 torch op(s) per call"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(ok)"), std::string::npos) << r.out;
}

TEST(TorchfuseCliTest, InspectPrintsPtxWhenAsked) {
  Result r = RunCli("inspect " + Model("gelu_traced.pt") + " --input f32[8,64] --arch sm_90 --ptx");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("== PTX of "), std::string::npos);
  EXPECT_NE(r.out.find(".target sm_90"), std::string::npos);
}

TEST(TorchfuseCliTest, DumpPrintsWhatWasAskedForOrWritesFiles) {
  const std::string model = Model("gelu_traced.pt");
  const std::string dir = cache::TempDir() + "/tf-dump-" + std::to_string(::getpid());
  const std::string cache_dir = dir + "-cache";
  ASSERT_TRUE(cache::RemoveTree(dir).ok());
  const std::string env = "TORCHFUSE_DUMP=graph,source ";
  const std::string cmd = " precompile " + model + " --input f32[8,64] --arch sm_90 --cache-dir " + cache_dir;
  Result some = RunCli(cmd, env);
  ASSERT_EQ(some.exit_code, 0) << some.out;
  EXPECT_NE(some.out.find("== torchfuse dump: graph f32[8,64]"), std::string::npos) << some.out;
  EXPECT_NE(some.out.find("== torchfuse dump: source tf_gelu"), std::string::npos) << some.out;
  EXPECT_EQ(some.out.find("== torchfuse dump: fusion"), std::string::npos) << some.out;
  EXPECT_EQ(some.out.find("== torchfuse dump: tuning"), std::string::npos) << some.out;
  Result all = RunCli(cmd, "TORCHFUSE_DUMP=all TORCHFUSE_DUMP_DIR=" + dir + " ");
  ASSERT_EQ(all.exit_code, 0) << all.out;
  EXPECT_EQ(all.out.find("== torchfuse dump"), std::string::npos) << all.out;
  std::vector<std::string> files = cache::ListFilesRecursively(dir);
  int graph = 0, fusion = 0, source = 0, tuning = 0;
  for (const std::string& f : files) {
    graph += f.find("-graph-") != std::string::npos;
    fusion += f.find("-fusion-") != std::string::npos;
    source += f.find("-source-") != std::string::npos && f.size() > 3 && f.substr(f.size() - 3) == ".cu";
    tuning += f.find("-tuning-") != std::string::npos;
  }
  EXPECT_EQ(graph, 1);
  EXPECT_EQ(fusion, 1);
  EXPECT_EQ(source, 1);
  EXPECT_EQ(tuning, 1);
  Result bad = RunCli(cmd, "TORCHFUSE_DUMP=graph,nonsense ");
  EXPECT_EQ(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("unknown item 'nonsense'"), std::string::npos) << bad.out;
  (void)cache::RemoveTree(dir);
  (void)cache::RemoveTree(cache_dir);
}

// `run` judges against an f64 evaluation: the bf16 hand-written norms, which round every op to
// bf16 in eager, pass, with both errors printed.
TEST(TorchfuseCliTest, RunJudgesAgainstAnExactReferenceAndPrintsBothErrors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const char* model : {"layernorm_scripted.pt", "rmsnorm_scripted.pt"}) {
    for (const char* spec : {"bf16[4096,1024]", "f16[3,7,1024]", "f32[64,1024]"}) {
      Result r = RunCli(std::string("run ") + Model(model) + " --input " + spec + " --iters 3");
      EXPECT_EQ(r.exit_code, 0) << r.out;
      EXPECT_NE(r.out.find("relative error against f64: eager "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(", torchfuse "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("(ok)"), std::string::npos) << r.out;
    }
  }
}

// A cache directory of a test's own, removed at the end.
class CliCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = cache::TempDir() + "/tf-cli-cache-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(cache::RemoveTree(dir_).ok());
  }
  void TearDown() override { (void)cache::RemoveTree(dir_); }
  std::string CacheArg() const { return " --cache-dir " + dir_; }
  int CountFiles() const { return static_cast<int>(cache::ListFilesRecursively(dir_).size()); }
  // Runs `cmd` in `n` processes at once; each one's exit code and output.
  std::vector<Result> RunConcurrently(const std::string& cmd, int n) const {
    std::string script;
    for (int i = 0; i < n; ++i) {
      script += "(" + cmd + " > " + dir_ + "-out" + std::to_string(i) + " 2>&1; echo $? > " +
                dir_ + "-rc" + std::to_string(i) + ") & ";
    }
    script += "wait";
    EXPECT_EQ(std::system(script.c_str()), 0);
    std::vector<Result> out;
    for (int i = 0; i < n; ++i) {
      std::ifstream rc(dir_ + "-rc" + std::to_string(i));
      std::ifstream text(dir_ + "-out" + std::to_string(i));
      std::stringstream all;
      all << text.rdbuf();
      int code = -1;
      rc >> code;
      out.push_back({code, all.str()});
      ::unlink((dir_ + "-rc" + std::to_string(i)).c_str());
      ::unlink((dir_ + "-out" + std::to_string(i)).c_str());
    }
    return out;
  }
  std::string dir_;
};

// What a user does without a GPU: precompile for sm_90, list, precompile again (nothing new),
// survive a cache whose every file is truncated, clear.
TEST_F(CliCacheTest, PrecompileListTruncateAndClear) {
  const std::string mlp = Model("mlp_traced.pt") + " --input f32[8,256]";
  Result path = RunCli("cache path" + CacheArg());
  ASSERT_EQ(path.exit_code, 0) << path.out;
  EXPECT_EQ(path.out, dir_ + "\n");
  Result first = RunCli("precompile " + mlp + " --arch sm_90" + CacheArg());
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_NE(first.out.find("4 kernel(s) for sm_90"), std::string::npos) << first.out;
  Result ls = RunCli("cache ls" + CacheArg());
  ASSERT_EQ(ls.exit_code, 0) << ls.out;
  EXPECT_NE(ls.out.find("tuning records: 1"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("gelu"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("sm_90"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("UNREADABLE"), std::string::npos) << ls.out;
  const int files = CountFiles();
  EXPECT_GE(files, 2);
  Result second = RunCli("precompile " + mlp + " --arch sm_90" + CacheArg());
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_NE(second.out.find(" 0 NVRTC compile(s)"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find(" 0 tuning run(s)"), std::string::npos) << second.out;
  EXPECT_EQ(CountFiles(), files);
  for (const std::string& f : cache::ListFilesRecursively(dir_)) {
    struct stat st;
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    ASSERT_EQ(::truncate(f.c_str(), st.st_size / 2), 0);
  }
  Result after = RunCli("precompile " + mlp + " --arch sm_90" + CacheArg());
  ASSERT_EQ(after.exit_code, 0) << after.out;
  EXPECT_NE(after.out.find("it will be rebuilt"), std::string::npos) << after.out;
  Result inspect = RunCli("inspect " + mlp + " --arch sm_90" + CacheArg());
  ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
  // What those runs needed is whole again: a further run compiles and tunes nothing.
  Result whole = RunCli("precompile " + mlp + " --arch sm_90" + CacheArg());
  ASSERT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_NE(whole.out.find(" 0 NVRTC compile(s)"), std::string::npos) << whole.out;
  EXPECT_NE(whole.out.find(" 0 tuning run(s)"), std::string::npos) << whole.out;
  Result clear = RunCli("cache clear" + CacheArg());
  ASSERT_EQ(clear.exit_code, 0) << clear.out;
  EXPECT_EQ(CountFiles(), 0);
  Result empty = RunCli("cache ls" + CacheArg());
  EXPECT_NE(empty.out.find("binaries: 0"), std::string::npos) << empty.out;
}

// Specs with size names: every combination of --sizes is precompiled, each under a header; a
// second run finds them all in the cache.
TEST_F(CliCacheTest, PrecompileCoversEveryCombinationOfSizes) {
  const std::string cmd = "precompile " + Model("softmax_scripted.pt") +
                          " --input f32[B,T] --sizes B=4,6 T=64,96,1000 --arch sm_90" + CacheArg();
  Result first = RunCli(cmd);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  EXPECT_EQ(CountOccurrences(first.out, "== B="), 6) << first.out;
  for (const char* label : {"== B=4 T=64\n", "== B=4 T=1000\n", "== B=6 T=96\n"}) {
    EXPECT_NE(first.out.find(label), std::string::npos) << label << first.out;
  }
  // Then the one plan for every size, run (on a GPU: tuned, its kernel per bucket of row
  // lengths) at each combination.
  const size_t every = first.out.find("== every size (one plan for f32[B,T])");
  ASSERT_NE(every, std::string::npos) << first.out;
  EXPECT_EQ(CountOccurrences(first.out.substr(0, every), "1 kernel(s) for sm_90"), 6) << first.out;
  EXPECT_NE(first.out.find(" kernel(s) for sm_90", every), std::string::npos) << first.out;
  Result second = RunCli(cmd);
  ASSERT_EQ(second.exit_code, 0) << second.out;
  EXPECT_EQ(CountOccurrences(second.out, " 0 NVRTC compile(s)"), 7) << second.out;
  EXPECT_EQ(CountOccurrences(second.out, " 0 tuning run(s)"), 7) << second.out;
  for (const char* args :
       {"precompile m.pt --input f32[8,T] --arch sm_90", "precompile m.pt --input f32[?,8]",
        "precompile m.pt --input f32[8,T] --sizes T=8,x", "precompile m.pt --input f32[8] --sizes Q=3",
        "inspect m.pt --input f32[8,T] --sizes T"}) {
    Result r = RunCli(std::string(args) + CacheArg());
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(CountOccurrences(r.out, "\n"), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("torchfuse: ", 0), 0u) << r.out;
  }
}

// Tools read `inspect --json` and `cache ls --json`: each prints one JSON document.
TEST_F(CliCacheTest, JsonOutputsAreDocumentsToolsCanRead) {
  const std::string mlp = Model("mlp_traced.pt") + " --input f32[8,256] --arch sm_90";
  Result inspect = RunCli("inspect " + mlp + " --json" + CacheArg(), "", /*stdout_only=*/true);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.out;
  const nlohmann::json report = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(report.at("format"), "torchfuse-inspect");
  ASSERT_EQ(report.at("kernels").size(), 4u);
  for (const nlohmann::json& k : report.at("kernels")) {
    EXPECT_EQ(k.at("arch"), 90);
    EXPECT_GT(k.at("binary_bytes").get<int64_t>(), 0);
    EXPECT_NE(k.at("source").get<std::string>().find("__global__"), std::string::npos);
  }
  EXPECT_EQ(report.at("explain").at("kernels"), 4);
  EXPECT_TRUE(report.at("explain").at("left_to_torch").is_array());
  Result empty = RunCli("cache ls --json" + CacheArg(), "", true);
  ASSERT_EQ(empty.exit_code, 0) << empty.out;
  // The model's four gelu kernels are one kernel: inspect compiled one binary.
  EXPECT_EQ(nlohmann::json::parse(empty.out).at("entries").size(), 1u);
  // Without tuning (as on a machine without a GPU): one record, one binary.
  ASSERT_EQ(RunCli("precompile " + mlp + CacheArg(), "TORCHFUSE_TUNE=0 ").exit_code, 0);
  Result ls = RunCli("cache ls --json" + CacheArg(), "", true);
  ASSERT_EQ(ls.exit_code, 0) << ls.out;
  const nlohmann::json listing = nlohmann::json::parse(ls.out);
  EXPECT_EQ(listing.at("format"), "torchfuse-cache-listing");
  EXPECT_EQ(listing.at("directory"), dir_);
  int records = 0, binaries = 0;
  for (const nlohmann::json& e : listing.at("entries")) {
    if (e.at("type") == "tuning") {
      ++records;
      EXPECT_EQ(e.at("record").at("format"), "torchfuse-tuning");
      EXPECT_FALSE(e.at("record").at("variant").get<std::string>().empty());
      EXPECT_NE(e.at("record").at("spec").get<std::string>().find("body"), std::string::npos);
    } else {
      ++binaries;
      EXPECT_EQ(e.at("type"), "binary");
    }
    EXPECT_FALSE(e.contains("problem")) << e.dump();
  }
  EXPECT_EQ(records, 1);
  EXPECT_EQ(binaries, 1);
}

TEST(TorchfuseCliTest, VersionIsThePackageVersion) {
  Result r = RunCli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("torchfuse ") + TF_VERSION + "\n");
}

// Progress of a precompile: one line per kernel on a terminal, nothing in a pipe unless info
// messages are asked for.
TEST_F(CliCacheTest, PrecompileShowsProgressOnATerminalOnly) {
  const std::string mlp = Model("mlp_traced.pt") + " --input f32[8,256] --arch sm_90";
  Result piped = RunCli("precompile " + mlp + CacheArg());
  ASSERT_EQ(piped.exit_code, 0) << piped.out;
  EXPECT_EQ(piped.out.find("precompile: kernel"), std::string::npos) << piped.out;
  ASSERT_TRUE(cache::RemoveTree(dir_).ok());
  Result info = RunCli("precompile " + mlp + CacheArg(), "TORCHFUSE_LOG=info ");
  ASSERT_EQ(info.exit_code, 0) << info.out;
  for (int i = 1; i <= 4; ++i) {
    EXPECT_NE(info.out.find("precompile: kernel " + std::to_string(i) + "/4 "), std::string::npos)
        << info.out;
  }
  // A terminal, through script(1) from util-linux (part of every Debian and Ubuntu system).
  ASSERT_TRUE(cache::RemoveTree(dir_).ok());
  const std::string cmd = "script -qec \"" + std::string(TF_TORCHFUSE_BIN) + " precompile " +
                          mlp + CacheArg() + "\" /dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  ASSERT_EQ(WEXITSTATUS(pclose(p)), 0) << out;
  EXPECT_NE(out.find("precompile: kernel 4/4 "), std::string::npos) << out;
  EXPECT_NE(out.find("\r"), std::string::npos) << "one overwritten line: " << out;
}

// Eight processes compile the same model into one empty cache at once: all succeed (on a GPU
// `run` also checks each result against eager), and the cache ends consistent.
TEST_F(CliCacheTest, EightProcessesShareOneCache) {
  const bool gpu = torch::cuda::is_available();
  const std::string cmd =
      std::string(TF_TORCHFUSE_BIN) + (gpu ? " run " : " precompile ") + Model("mlp_traced.pt") +
      " --input f32[8,256]" + (gpu ? " --iters 3" : " --arch sm_90") + CacheArg();
  for (const Result& r : RunConcurrently(cmd, 8)) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    if (gpu) {
      EXPECT_NE(r.out.find("(ok)"), std::string::npos) << r.out;
    }
  }
  Result ls = RunCli("cache ls" + CacheArg());
  EXPECT_EQ(ls.out.find("UNREADABLE"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("tuning records: 1"), std::string::npos) << ls.out;
  for (const std::string& f : cache::ListFilesRecursively(dir_)) {
    EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  }
  // A ninth process finds everything there.
  Result again = RunCli("precompile " + Model("mlp_traced.pt") + " --input f32[8,256]" +
                        (gpu ? "" : " --arch sm_90") + CacheArg());
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find(" 0 NVRTC compile(s)"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find(" 0 tuning run(s)"), std::string::npos) << again.out;
}

// Eight processes precompile one model on one GPU into one empty cache at once: the kernel is
// tuned once in all (one process holds its lock and times; the others wait for its record), and
// every process runs the same variant.
TEST_F(CliCacheTest, EightProcessesOnOneGpuTuneEachKernelOnce) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string cmd = std::string(TF_TORCHFUSE_BIN) + " precompile " +
                          Model("softmax_traced.pt") + " --input f32[4096,1024]" + CacheArg();
  int tuning_runs = 0;
  std::set<std::string> variants;
  for (const Result& r : RunConcurrently(cmd, 8)) {
    ASSERT_EQ(r.exit_code, 0) << r.out;
    // "1 kernel(s) for sm_90 (run and tuned on this GPU): ... N tuning run(s)\n  NAME  VARIANT"
    const std::string& t = r.out;
    const size_t runs = t.find(" tuning run(s)");
    ASSERT_NE(runs, std::string::npos) << t;
    const size_t comma = t.rfind(", ", runs);
    tuning_runs += std::stoi(t.substr(comma + 2, runs - comma - 2));
    const size_t line = t.find("\n  ", runs);
    ASSERT_NE(line, std::string::npos) << t;
    std::istringstream kernel(t.substr(line + 3));
    std::string name, variant;
    kernel >> name >> variant;
    variants.insert(variant);
  }
  EXPECT_EQ(tuning_runs, 1);
  EXPECT_EQ(variants.size(), 1u) << *variants.begin();
  Result ls = RunCli("cache ls --json" + CacheArg(), "", true);
  const nlohmann::json listing = nlohmann::json::parse(ls.out);
  int records = 0;
  for (const nlohmann::json& e : listing.at("entries")) {
    if (e.at("type") != "tuning") continue;
    ++records;
    EXPECT_TRUE(e.at("record").at("tuned").get<bool>());
    EXPECT_EQ(e.at("record").at("variant"), *variants.begin());
  }
  EXPECT_EQ(records, 1);
}

// A build machine precompiles for sm_90 without a GPU and ships the cache: after the import, the
// other host's cache compiles nothing for that model.
TEST_F(CliCacheTest, PrecompiledCacheShipsThroughExportAndImport) {
  const std::string mlp = Model("mlp_traced.pt") + " --input f32[8,256] --arch sm_90";
  // No tuning, as on a build machine without a GPU (with one, tuning would add binaries).
  const std::string untuned = "TORCHFUSE_TUNE=0 ";
  ASSERT_EQ(RunCli("precompile " + mlp + CacheArg(), untuned).exit_code, 0);
  const std::string tar = dir_ + "-ship.tar";
  Result exported = RunCli("cache export " + tar + CacheArg());
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  EXPECT_NE(exported.out.find("exported 1 binary(ies) and 1 tuning record(s)"), std::string::npos)
      << exported.out;
  const std::string other = " --cache-dir " + dir_ + "-other";
  Result imported = RunCli("cache import " + tar + other);
  ASSERT_EQ(imported.exit_code, 0) << imported.out;
  EXPECT_NE(imported.out.find("imported 1 binary(ies) and 1 tuning record(s)"), std::string::npos)
      << imported.out;
  Result after = RunCli("precompile " + mlp + other, untuned);
  ASSERT_EQ(after.exit_code, 0) << after.out;
  EXPECT_NE(after.out.find(" 0 NVRTC compile(s), 1 binary(ies) from the cache"), std::string::npos)
      << after.out;
  // A file that is not an archive is refused in one line, naming it.
  std::ofstream(tar) << "junk";
  Result bad = RunCli("cache import " + tar + other);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.out.find(tar + "' refused"), std::string::npos) << bad.out;
  EXPECT_EQ(RunCli("cache import" + other).exit_code, 1);
  ::unlink(tar.c_str());
  (void)cache::RemoveTree(dir_ + "-other");
}

// The same with background tuning (the tests' mode; `run`, like the Python package, tunes
// lazily by default, which differs only in running torch ops until the heuristic's kernel has
// compiled): one process tunes while the others run the heuristic's variant and pick up its
// record.
TEST_F(CliCacheTest, EightProcessesTuningInTheBackgroundTuneEachKernelOnce) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string cmd = "TORCHFUSE_LOG=info " + std::string(TF_TORCHFUSE_BIN) + " run " +
                          Model("softmax_traced.pt") + " --input f32[2048,1024] --iters 200" +
                          CacheArg();
  int tuned = 0;
  for (const Result& r : RunConcurrently(cmd, 8)) {
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("(ok)"), std::string::npos) << r.out;
    for (size_t at = r.out.find(", tuned in "); at != std::string::npos;
         at = r.out.find(", tuned in ", at + 1)) {
      ++tuned;
    }
  }
  EXPECT_EQ(tuned, 1);
  Result ls = RunCli("cache ls --json" + CacheArg(), "", true);
  const nlohmann::json listing = nlohmann::json::parse(ls.out);  // outlives the loop
  int records = 0;
  for (const nlohmann::json& e : listing.at("entries")) {
    EXPECT_FALSE(e.contains("problem")) << e.dump();
    if (e.at("type") != "tuning") continue;
    ++records;
    EXPECT_TRUE(e.at("record").at("tuned").get<bool>());
  }
  EXPECT_EQ(records, 1) << ls.out;
}

TEST_F(CliCacheTest, RebuildRecompilesEveryRecordedKernel) {
  ASSERT_EQ(RunCli("precompile " + Model("softmax_traced.pt") + " --input f32[64,1024] --arch sm_90" +
                   CacheArg()).exit_code, 0);
  ASSERT_EQ(RunCli("precompile " + Model("rmsnorm_traced.pt") + " --input f32[64,1024] --arch sm_90" +
                   CacheArg()).exit_code, 0);
  Result r = RunCli("cache rebuild" + CacheArg());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rebuilt 2 kernel(s)"), std::string::npos) << r.out;
  Result ls = RunCli("cache ls" + CacheArg());
  EXPECT_NE(ls.out.find("tuning records: 2"), std::string::npos) << ls.out;
}

}  // namespace
}  // namespace torchfuse
