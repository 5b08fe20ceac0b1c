// Ahead-of-time compilation and cache management, without a GPU (arch sm_80 is compiled for,
// which no test machine has, so these run the compile-only path everywhere).
#include "runtime/precompile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "autotune/tuning_store.h"
#include "cache/disk_cache.h"
#include "cache/files.h"
#include "cache/tuning_record.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "frontend_torch/torchscript_importer.h"
#include "runtime/kernel_choice.h"
#include "../frontend_torch/test_models.h"
#include "../support/scoped_env.h"

namespace torchfuse {
namespace {

constexpr int kArch = 80;

class PrecompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = absl::StrCat(cache::TempDir(), "/tf-precompile-test-", ::getpid(), "-", rd());
    options_.cache_dir = dir_;
    FreshProcess();
  }
  void TearDown() override {
    ASSERT_TRUE(cache::RemoveTree(dir_).ok());
  }
  // What a new process would start with: nothing in memory.
  static void FreshProcess() {
    codegen::ResetProcessKernelCache();
    autotune::ResetProcessTuningRecords();
  }
  static torch::jit::Module Load(const std::string& file) {
    auto m = frontend::LoadModule(testing::ModelPath(file));
    EXPECT_TRUE(m.ok()) << m.status();
    return *m;
  }
  static graph::TensorType Spec(const std::string& text) { return *graph::ParseTensorType(text); }
  // Every file under the cache with its modification time.
  std::map<std::string, std::pair<int64_t, int64_t>> Files() const {
    std::map<std::string, std::pair<int64_t, int64_t>> files;
    for (const std::string& f : cache::ListFilesRecursively(dir_)) {
      struct stat st;
      if (::stat(f.c_str(), &st) == 0) {
        files[f] = {static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    st.st_size};
      }
    }
    return files;
  }
  std::vector<CacheListing> Listing(const std::string& type) const {
    std::vector<CacheListing> out;
    const std::vector<CacheListing> all = CacheList(options_).value();
    for (const CacheListing& l : all) {
      if (l.type == type) out.push_back(l);
    }
    return out;
  }

  std::string dir_;
  Options options_;
};

TEST_F(PrecompileTest, FillsTheCacheAndASecondRunCompilesAndWritesNothing) {
  auto r = Precompile(Load("mlp_traced.pt"), {Spec("f32[8,256]")}, options_, kArch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernels, 4);
  EXPECT_FALSE(r->on_gpu);
  EXPECT_EQ(r->nvrtc_compiles, 1);  // four identical gelu groups: one binary
  EXPECT_EQ(r->tuning_runs, 0);
  std::vector<CacheListing> records = Listing("tuning");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].kernel, "bias_gelu");  // each layer's bias joins its GELU's kernel
  EXPECT_EQ(records[0].arch, kArch);
  EXPECT_FALSE(records[0].tuned);   // the heuristic's choice, recorded as such
  EXPECT_EQ(records[0].gpu, "");
  EXPECT_EQ(records[0].variant, "b128_u1");
  EXPECT_EQ(Listing("binary").size(), 1u);
  const auto before = Files();

  FreshProcess();
  auto again = Precompile(Load("mlp_traced.pt"), {Spec("f32[8,256]")}, options_, kArch);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->nvrtc_compiles, 0);
  EXPECT_EQ(again->disk_hits, 1);
  EXPECT_EQ(again->tuning_runs, 0);
  EXPECT_EQ(Files(), before);
}

TEST_F(PrecompileTest, RowKernelsAreRecordedPerBucketAndShareBinariesAcrossBatchSizes) {
  torch::jit::Module softmax = Load("softmax_traced.pt");
  ASSERT_TRUE(Precompile(softmax, {Spec("f32[8,1024]")}, options_, kArch).ok());
  auto same_bucket = Precompile(softmax, {Spec("f32[6,1024]")}, options_, kArch);
  ASSERT_TRUE(same_bucket.ok());
  EXPECT_EQ(same_bucket->nvrtc_compiles, 0);
  EXPECT_EQ(Listing("tuning").size(), 1u);
  auto other_bucket = Precompile(softmax, {Spec("f32[100,1024]")}, options_, kArch);
  ASSERT_TRUE(other_bucket.ok());
  EXPECT_EQ(other_bucket->nvrtc_compiles, 0);  // same variant, same source: same binary
  std::vector<CacheListing> records = Listing("tuning");
  ASSERT_EQ(records.size(), 2u);
  std::set<std::string> buckets = {records[0].bucket, records[1].bucket};
  EXPECT_EQ(buckets, (std::set<std::string>{"D=1024,rows<=8", "D=1024,rows<=128"}));
  // A new row length is a new kernel.
  auto longer = Precompile(softmax, {Spec("f32[8,2048]")}, options_, kArch);
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->nvrtc_compiles, 1);
}

TEST_F(PrecompileTest, RecordsCarryASpecThatRebuildsTheKernel) {
  ASSERT_TRUE(Precompile(Load("layernorm_traced.pt"), {Spec("f32[64,1024]")}, options_, kArch).ok());
  auto disk = cache::DiskCache::Open(dir_);
  ASSERT_TRUE(disk.ok());
  int records = 0;
  for (const cache::ListedEntry& e : (*disk)->List()) {
    if (e.kind != cache::EntryKind::kTuning) continue;
    ++records;
    auto r = cache::TuningRecordFromEntry(*e.entry);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->kind, "row");
    auto spec = runtime::ParseSpecText(r->spec);
    ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << r->spec;
    EXPECT_EQ(spec->kind, "row");
    EXPECT_EQ(spec->input_types.front().ToString(), "f32[64,1024]");
    EXPECT_EQ(spec->inputs.front().strides, (std::vector<int64_t>{1024, 1}));
    EXPECT_GT(spec->body->nodes().size(), 3u);
  }
  EXPECT_EQ(records, 1);
  // Rebuild without a GPU: every recorded binary is compiled again, records are kept.
  FreshProcess();
  auto rebuilt = CacheRebuild(options_, kArch);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(rebuilt->kernels, 1);
  EXPECT_EQ(rebuilt->nvrtc_compiles, 1);
  EXPECT_EQ(Listing("tuning").size(), 1u);
  EXPECT_EQ(Listing("binary").size(), 1u);
}

// A record that chose the group's own torch ops (a GPU's tuning found them faster): compiling
// ahead and rebuilding without a GPU compile no kernel for it, and keep the record.
TEST_F(PrecompileTest, ARecordOfTorchOpsCompilesNoKernel) {
  torch::jit::Module layernorm = Load("layernorm_traced.pt");
  ASSERT_TRUE(Precompile(layernorm, {Spec("f32[64,1024]")}, options_, kArch).ok());
  auto disk = cache::DiskCache::Open(dir_);
  ASSERT_TRUE(disk.ok());
  std::optional<cache::TuningRecord> record;
  for (const cache::ListedEntry& e : (*disk)->List()) {
    if (e.kind == cache::EntryKind::kTuning) record = *cache::TuningRecordFromEntry(*e.entry);
  }
  ASSERT_TRUE(record.has_value());
  record->variant = runtime::kTorchVariant;
  record->tuned = true;
  ASSERT_TRUE(CacheClear(options_).ok());
  autotune::SaveRecord(*record, disk->get());

  FreshProcess();
  auto r = Precompile(layernorm, {Spec("f32[64,1024]")}, options_, kArch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kernels, 1);
  EXPECT_EQ(r->variants, std::vector<std::string>{runtime::kTorchVariant});
  EXPECT_EQ(r->nvrtc_compiles, 0);
  EXPECT_TRUE(Listing("binary").empty());
  FreshProcess();
  auto rebuilt = CacheRebuild(options_, kArch);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(rebuilt->variants, std::vector<std::string>{runtime::kTorchVariant});
  EXPECT_EQ(rebuilt->nvrtc_compiles, 0);
  std::vector<CacheListing> records = Listing("tuning");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].variant, runtime::kTorchVariant);
  EXPECT_TRUE(records[0].tuned);
  // Without the torch candidate the record is no choice: the heuristic's kernel compiles.
  absl::StatusOr<PrecompileReport> without;
  {
    test_support::ScopedEnv no_torch("TORCHFUSE_TUNE_TORCH", "0");
    FreshProcess();
    without = Precompile(layernorm, {Spec("f32[64,1024]")}, options_, kArch);
  }
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->nvrtc_compiles, 1);
  EXPECT_NE(without->variants.at(0), runtime::kTorchVariant);
}

TEST_F(PrecompileTest, TruncatedEntriesAreIgnoredAndRebuilt) {
  ASSERT_TRUE(Precompile(Load("mlp_traced.pt"), {Spec("f32[8,256]")}, options_, kArch).ok());
  for (const auto& [path, time_size] : Files()) {
    ASSERT_EQ(::truncate(path.c_str(), time_size.second / 3), 0);
  }
  FreshProcess();
  auto r = Precompile(Load("mlp_traced.pt"), {Spec("f32[8,256]")}, options_, kArch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nvrtc_compiles, 1);
  const std::vector<CacheListing> all = CacheList(options_).value();
  for (const CacheListing& l : all) EXPECT_EQ(l.problem, "") << l.path;
  EXPECT_EQ(Listing("tuning").size(), 1u);
  EXPECT_EQ(Listing("binary").size(), 1u);
}

TEST_F(PrecompileTest, ClearLeavesNoEntry) {
  ASSERT_TRUE(Precompile(Load("rmsnorm_traced.pt"), {Spec("f32[16,1024]")}, options_, kArch).ok());
  EXPECT_FALSE(CacheList(options_)->empty());
  ASSERT_TRUE(CacheClear(options_).ok());
  EXPECT_TRUE(CacheList(options_)->empty());
  EXPECT_EQ(Files().size(), 0u);
}

TEST_F(PrecompileTest, WithoutAnArchOrAGpuSaysWhatToDo) {
  if (std::system("nvidia-smi > /dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU is present";
  auto r = Precompile(Load("gelu_traced.pt"), {Spec("f32[8,256]")}, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("sm_90"), std::string::npos);
}

}  // namespace
}  // namespace torchfuse
