#include "cache/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "cache/files.h"
#include "cache/tuning_record.h"
#include "nlohmann/json.hpp"
#include "../support/scoped_env.h"

namespace torchfuse::cache {
namespace {

namespace fs = std::filesystem;

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / absl::StrCat("tf-disk-cache-test-", ::getpid(), "-", rd());
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  static Entry Sample(int i) {
    Entry e;
    e.fields["kernel"] = absl::StrCat("tf_kernel_", i);
    e.fields["arch"] = "90";
    std::string payload;
    for (int k = 0; k < 1000 + i; ++k) payload.push_back(static_cast<char>((k * 31 + i) & 0xff));
    e.payload = payload;
    return e;
  }
  fs::path dir_;
};

TEST_F(DiskCacheTest, EntryRoundTrips) {
  const Entry e = Sample(3);
  auto back = DecodeEntry(EncodeEntry(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fields, e.fields);
  EXPECT_EQ(back->payload, e.payload);
}

TEST_F(DiskCacheTest, EveryTruncationAndEveryFlippedByteIsRejected) {
  const std::string bytes = EncodeEntry(Sample(1));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeEntry(bytes.substr(0, n)).ok()) << "truncated to " << n;
  }
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_FALSE(DecodeEntry(bad).ok()) << "flipped byte " << i;
  }
}

TEST_F(DiskCacheTest, OtherFormatVersionIsRejectedAsSuch) {
  std::string bytes = EncodeEntry(Sample(1));
  const std::string magic = absl::StrCat("torchfuse-cache ", kFormatVersion, "\n");
  bytes.replace(0, magic.size(), absl::StrCat("torchfuse-cache ", kFormatVersion + 1, "\n"));
  auto e = DecodeEntry(bytes);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition) << e.status();
}

TEST_F(DiskCacheTest, CreatesAPrivateDirectoryAndWritesAtomically) {
  auto cache = DiskCache::Open((dir_ / "a" / "b").string());
  ASSERT_TRUE(cache.ok()) << cache.status();
  struct stat st;
  ASSERT_EQ(::stat((dir_ / "a" / "b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  EXPECT_TRUE((*cache)->trusted());
  EXPECT_FALSE((*cache)->Read(EntryKind::kBinary, "k1").has_value());
  ASSERT_TRUE((*cache)->Write(EntryKind::kBinary, "k1", Sample(1)).ok());
  ASSERT_TRUE((*cache)->Write(EntryKind::kBinary, "k1", Sample(2)).ok());  // replaces
  auto got = (*cache)->Read(EntryKind::kBinary, "k1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload, Sample(2).payload);
  // No temp file is left behind.
  int files = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir_)) files += f.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(DiskCacheTest, CorruptTruncatedAndForeignEntriesMissAndAreReplaced) {
  auto cache = DiskCache::Open(dir_.string());
  ASSERT_TRUE(cache.ok());
  const DiskCache& c = **cache;
  for (const char* key : {"trunc", "flip", "foreign"}) {
    ASSERT_TRUE(c.Write(EntryKind::kTuning, key, Sample(5)).ok());
  }
  const std::string full = ReadFile(c.PathOf(EntryKind::kTuning, "trunc")).value();
  std::ofstream(c.PathOf(EntryKind::kTuning, "trunc"), std::ios::binary)
      << full.substr(0, full.size() / 2);
  std::string flipped = full;
  flipped[full.size() / 2] ^= 1;
  std::ofstream(c.PathOf(EntryKind::kTuning, "flip"), std::ios::binary) << flipped;
  std::string foreign = full;
  foreign.replace(0, 17, "torchfuse-cache 0");
  std::ofstream(c.PathOf(EntryKind::kTuning, "foreign"), std::ios::binary) << foreign;
  for (const char* key : {"trunc", "flip", "foreign"}) {
    EXPECT_FALSE(c.Read(EntryKind::kTuning, key).has_value()) << key;
    EXPECT_FALSE(fs::exists(c.PathOf(EntryKind::kTuning, key))) << key << " was not removed";
    ASSERT_TRUE(c.Write(EntryKind::kTuning, key, Sample(6)).ok());
    auto again = c.Read(EntryKind::kTuning, key);
    ASSERT_TRUE(again.has_value()) << key;
    EXPECT_EQ(again->payload, Sample(6).payload);
  }
}

TEST_F(DiskCacheTest, DirectoryOthersCanWriteIsUntrustedForBinaries) {
  ASSERT_TRUE(DiskCache::Open(dir_.string()).ok());
  ASSERT_TRUE((*DiskCache::Open(dir_.string()))->Write(EntryKind::kBinary, "k", Sample(1)).ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  auto cache = DiskCache::Open(dir_.string());
  ASSERT_TRUE(cache.ok());
  EXPECT_FALSE((*cache)->trusted());
  EXPECT_FALSE((*cache)->Read(EntryKind::kBinary, "k").has_value());
  // Tuning records only choose among kernels torchfuse writes itself: still read.
  ASSERT_TRUE((*cache)->Write(EntryKind::kTuning, "t", Sample(2)).ok());
  EXPECT_TRUE((*cache)->Read(EntryKind::kTuning, "t").has_value());
}

TEST_F(DiskCacheTest, ListAndClear) {
  auto cache = DiskCache::Open(dir_.string());
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Write(EntryKind::kBinary, "b1", Sample(1)).ok());
  ASSERT_TRUE((*cache)->Write(EntryKind::kTuning, "t1", Sample(2)).ok());
  std::ofstream((*cache)->PathOf(EntryKind::kTuning, "t2")) << "garbage";
  std::vector<ListedEntry> all = (*cache)->List();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].kind, EntryKind::kBinary);
  EXPECT_TRUE(all[0].entry.has_value());
  EXPECT_EQ(all[2].key, "t2");
  EXPECT_FALSE(all[2].entry.has_value());
  EXPECT_FALSE(all[2].problem.empty());
  std::ofstream(dir_ / "unrelated.txt") << "kept";
  ASSERT_TRUE((*cache)->Clear().ok());
  EXPECT_TRUE((*cache)->List().empty());
  EXPECT_TRUE(fs::exists(dir_ / "unrelated.txt"));
  ASSERT_TRUE((*cache)->Write(EntryKind::kBinary, "b1", Sample(1)).ok());  // still usable
}

TEST_F(DiskCacheTest, DefaultDirectoryFollowsTheEnvironment) {
  // Each ScopedEnv restores its variable's value from before the test.
  test_support::ScopedEnv cache_dir("TORCHFUSE_CACHE_DIR", "/x/y");
  EXPECT_EQ(DefaultCacheDir(), "/x/y");
  ::unsetenv("TORCHFUSE_CACHE_DIR");
  test_support::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(DefaultCacheDir(), "/xdg/torchfuse");
  ::unsetenv("XDG_CACHE_HOME");
  test_support::ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(DefaultCacheDir(), "/home/u/.cache/torchfuse");
}

TEST_F(DiskCacheTest, TuningRecordRoundTripsAndKeysDiffer) {
  TuningRecord r;
  r.key = {std::string(64, 'a'), "D=1024,rows<=4096", "NVIDIA H200", 90, 13000};
  r.kernel = "softmax";
  r.kind = "row";
  r.variant = "block_t128";
  r.ms = 0.0123;
  r.tuned = true;
  r.created_unix = 1700000000;
  r.trials = "block_t128=0.0123;warp_t32_r4=0.0200";
  r.spec = "kind row\nbody\n...";
  auto back = TuningRecordFromEntry(ToEntry(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->key == r.key);
  EXPECT_EQ(back->variant, r.variant);
  EXPECT_NEAR(back->ms, r.ms, 1e-6);
  EXPECT_TRUE(back->tuned);
  EXPECT_EQ(back->spec, r.spec);
  TuningKey other = r.key;
  other.driver = 13010;
  EXPECT_NE(other.Hash(), r.key.Hash());
  other = r.key;
  other.bucket = "D=1024,rows<=8192";
  EXPECT_NE(other.Hash(), r.key.Hash());
  // The record is a JSON document tools can read; every trial keeps its outcome.
  const nlohmann::json doc = nlohmann::json::parse(ToEntry(r).payload);
  EXPECT_EQ(doc.at("format"), "torchfuse-tuning");
  EXPECT_EQ(doc.at("version"), kFormatVersion);
  EXPECT_EQ(doc.at("key").at("gpu"), "NVIDIA H200");
  EXPECT_EQ(doc.at("variant"), "block_t128");
  ASSERT_EQ(doc.at("trials").size(), 2u);
  EXPECT_EQ(doc.at("trials")[1].at("variant"), "warp_t32_r4");
  EXPECT_DOUBLE_EQ(doc.at("trials")[1].at("ms").get<double>(), 0.02);
  r.trials = "a=0.5;b=compile failed";
  back = TuningRecordFromEntry(ToEntry(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->trials, r.trials);
  nlohmann::json missing = doc;
  missing.erase("variant");
  Entry broken = ToEntry(r);
  broken.payload = missing.dump();
  EXPECT_FALSE(TuningRecordFromEntry(broken).ok());
  broken.payload = "{\"format\": \"torchfuse-tuning\", \"version\": 1}";
  EXPECT_FALSE(TuningRecordFromEntry(broken).ok());
  // A choice timed outside the kernels (the attention rewrite's form) is a record too; a kind
  // nothing makes is not.
  r.kind = "attention";
  r.kernel = "attention";
  r.variant = "efficient";
  r.key.bucket = "timed";
  r.spec = "attention forms ((2048, 3, 49, 32), ...)";
  back = TuningRecordFromEntry(ToEntry(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, "attention");
  EXPECT_EQ(back->variant, "efficient");
  r.kind = "conv";
  EXPECT_FALSE(TuningRecordFromEntry(ToEntry(r)).ok());
}

// The format before JSON headers (version 1): a tuning record as one field per line. A cache
// written by such a build keeps its entries under v1/; this build neither reads nor lists them,
// tunes again into v2/, and `clear` removes both.
TEST_F(DiskCacheTest, EntriesOfTheOldFormatAreRebuiltNotMisread) {
  const std::string v1_entry =
      "torchfuse-cache 1\nbucket rows<=4096\nkernel tf_softmax\nvariant block_t128\n"
      "payload 0\nsha256 0000000000000000000000000000000000000000000000000000000000000000\n";
  fs::create_directories(dir_ / "v1" / "tune");
  std::ofstream(dir_ / "v1" / "tune" / "k", std::ios::binary) << v1_entry;
  auto cache = DiskCache::Open(dir_.string());
  ASSERT_TRUE(cache.ok());
  const DiskCache& c = **cache;
  EXPECT_FALSE(c.Read(EntryKind::kTuning, "k").has_value());
  EXPECT_TRUE(c.List().empty());
  // The same bytes where a current entry belongs are refused as another version and removed.
  std::ofstream(c.PathOf(EntryKind::kTuning, "k"), std::ios::binary) << v1_entry;
  auto decoded = DecodeEntry(v1_entry);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(c.Read(EntryKind::kTuning, "k").has_value());
  EXPECT_FALSE(fs::exists(c.PathOf(EntryKind::kTuning, "k")));
  ASSERT_TRUE(c.Write(EntryKind::kTuning, "k", Sample(4)).ok());
  EXPECT_EQ(c.Read(EntryKind::kTuning, "k")->payload, Sample(4).payload);
  ASSERT_TRUE(c.Clear().ok());
  EXPECT_FALSE(fs::exists(dir_ / "v1"));
}

// Eight processes write and read the same keys at once: every read sees a whole entry, and
// the directory ends consistent, with no temp files.
TEST_F(DiskCacheTest, ConcurrentWriterProcessesLeaveAConsistentCache) {
  ASSERT_TRUE(DiskCache::Open(dir_.string()).ok());
  std::vector<pid_t> children;
  for (int p = 0; p < 8; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cache = DiskCache::Open(dir_.string());
      int bad = !cache.ok();
      for (int round = 0; round < 40 && !bad; ++round) {
        for (int k = 0; k < 5; ++k) {
          const std::string key = absl::StrCat("key", k);
          bad |= !(*cache)->Write(EntryKind::kBinary, key, Sample(k)).ok();
          auto e = (*cache)->Read(EntryKind::kBinary, key);
          bad |= !e.has_value() || e->payload != Sample(k).payload;
        }
      }
      ::_exit(bad);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto cache = DiskCache::Open(dir_.string());
  std::vector<ListedEntry> all = (*cache)->List();
  ASSERT_EQ(all.size(), 5u);
  for (const ListedEntry& e : all) EXPECT_TRUE(e.entry.has_value()) << e.path << e.problem;
  int files = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir_)) files += f.is_regular_file();
  EXPECT_EQ(files, 5);
}

}  // namespace
}  // namespace torchfuse::cache
