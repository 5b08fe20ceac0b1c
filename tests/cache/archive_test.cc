// Shipping a cache: export, import elsewhere, and every kind of bad archive refused whole.
#include "cache/archive.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/files.h"
#include "cache/sha256.h"
#include "cache/tuning_record.h"
#include "nlohmann/json.hpp"

namespace torchfuse::cache {
namespace {

// A ustar archive written independently of the code under test, so that tests can make
// archives that code would never write.
struct TarMember {
  std::string name;
  std::string data;
  char type = '0';
};
std::string Tar(const std::vector<TarMember>& members) {
  auto octal = [](char* f, size_t w, uint64_t v) {
    char digits[32];
    std::snprintf(digits, sizeof(digits), "%0*llo", static_cast<int>(w - 1),
                  static_cast<unsigned long long>(v));
    std::memcpy(f, digits, w - 1);
    f[w - 1] = '\0';
  };
  std::string out;
  for (const TarMember& m : members) {
    std::string h(512, '\0');
    std::memcpy(&h[0], m.name.data(), std::min<size_t>(m.name.size(), 100));
    octal(&h[100], 8, 0644);
    octal(&h[108], 8, 0);
    octal(&h[116], 8, 0);
    octal(&h[124], 12, m.data.size());
    octal(&h[136], 12, 0);
    std::memset(&h[148], ' ', 8);
    h[156] = m.type;
    std::memcpy(&h[257], "ustar", 6);
    std::memcpy(&h[263], "00", 2);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    octal(&h[148], 7, sum);
    out += h + m.data + std::string((512 - m.data.size() % 512) % 512, '\0');
  }
  return out + std::string(1024, '\0');
}

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TempDir() + "/tf-archive-" + std::to_string(::getpid());
    ASSERT_TRUE(RemoveTree(base_).ok());
    src_ = *DiskCache::Open(base_ + "/src");
    dst_ = *DiskCache::Open(base_ + "/dst");
    Entry bin;
    bin.fields["kernel"] = "tf_softmax";
    bin.fields["arch"] = "90";
    for (int i = 0; i < 3000; ++i) bin.payload.push_back(static_cast<char>(i * 7));
    ASSERT_TRUE(src_->Write(EntryKind::kBinary, std::string(64, 'b'), bin).ok());
    TuningRecord r;
    r.key = {std::string(64, 'a'), "D=1024,rows<=4096", "", 90, 0};
    r.kernel = "softmax";
    r.kind = "row";
    r.variant = "block_t128";
    r.spec = "kind row\n";
    ASSERT_TRUE(src_->Write(EntryKind::kTuning, r.key.Hash(), ToEntry(r)).ok());
    tune_key_ = r.key.Hash();
    archive_ = base_ + "/cache.tar";
  }
  void TearDown() override { (void)RemoveTree(base_); }

  // The members of a good export, for tests to tamper with.
  std::vector<TarMember> GoodMembers() {
    std::vector<TarMember> m;
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& [kind, key] : {std::pair{EntryKind::kBinary, std::string(64, 'b')},
                                    std::pair{EntryKind::kTuning, tune_key_}}) {
      const std::string data = ReadFile(src_->PathOf(kind, key)).value();
      const std::string path = absl::StrCat("v", kFormatVersion, "/", EntryKindDir(kind), "/", key);
      entries.push_back({{"path", path}, {"bytes", data.size()}, {"sha256", Sha256Hex(data)}});
      m.push_back({path, data});
    }
    nlohmann::json manifest = {{"format", "torchfuse-cache-archive"}, {"version", 1},
                               {"cache_format", kFormatVersion}, {"entries", entries}};
    m.insert(m.begin(), {"torchfuse-cache-archive.json", manifest.dump()});
    return m;
  }

  void ExpectRefused(const std::vector<TarMember>& members, const std::string& why) {
    std::ofstream(archive_, std::ios::binary) << Tar(members);
    auto r = ImportCache(*dst_, archive_);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_NE(std::string(r.status().message()).find(why), std::string::npos) << r.status();
    EXPECT_NE(std::string(r.status().message()).find("refused"), std::string::npos);
    EXPECT_TRUE(dst_->List().empty()) << "nothing is written from a refused archive";
  }

  std::string base_, archive_, tune_key_;
  std::shared_ptr<DiskCache> src_, dst_;
};

TEST_F(ArchiveTest, ExportedCacheImportsWithTheSameBytes) {
  auto out = ExportCache(*src_, archive_);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->binaries, 1);
  EXPECT_EQ(out->tuning_records, 1);
  auto in = ImportCache(*dst_, archive_);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->binaries, 1);
  EXPECT_EQ(in->tuning_records, 1);
  EXPECT_EQ(in->unchanged, 0);
  for (const auto& [kind, key] : {std::pair{EntryKind::kBinary, std::string(64, 'b')},
                                  std::pair{EntryKind::kTuning, tune_key_}}) {
    EXPECT_EQ(ReadFile(dst_->PathOf(kind, key)).value(), ReadFile(src_->PathOf(kind, key)).value());
  }
  auto record = TuningRecordFromEntry(*dst_->Read(EntryKind::kTuning, tune_key_));
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->variant, "block_t128");
  auto again = ImportCache(*dst_, archive_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->unchanged, 2);
  // The hand-made archive of the same entries imports too: the format is plain ustar.
  ASSERT_TRUE(dst_->Clear().ok());
  std::ofstream(archive_, std::ios::binary) << Tar(GoodMembers());
  EXPECT_TRUE(ImportCache(*dst_, archive_).ok());
}

TEST_F(ArchiveTest, PathsOutsideTheCacheAreRefused) {
  for (const std::string& bad : std::vector<std::string>{"../../etc/cron.d/x", "/etc/passwd",
                                absl::StrCat("v", kFormatVersion, "/bin/../../x"),
                                absl::StrCat("v", kFormatVersion, "/other/", std::string(64, 'c')),
                                absl::StrCat("v", kFormatVersion, "/bin/short")}) {
    std::vector<TarMember> m = GoodMembers();
    m.push_back({bad, "x"});
    ExpectRefused(m, "is not a cache entry");
  }
}

TEST_F(ArchiveTest, ForeignVersionsBadChecksumsAndOddMembersAreRefused) {
  {
    std::vector<TarMember> m = GoodMembers();
    nlohmann::json manifest = nlohmann::json::parse(m[0].data);
    manifest["cache_format"] = kFormatVersion + 1;
    m[0].data = manifest.dump();
    ExpectRefused(m, absl::StrCat("cache format ", kFormatVersion + 1));
  }
  {
    std::vector<TarMember> m = GoodMembers();
    m[1].data[m[1].data.size() / 2] ^= 1;
    ExpectRefused(m, "does not match its checksum");
  }
  {
    std::vector<TarMember> m = GoodMembers();
    m.pop_back();
    ExpectRefused(m, "is missing");
  }
  {
    std::vector<TarMember> m = GoodMembers();
    m[2].type = '2';  // a symbolic link
    ExpectRefused(m, "not a plain file");
  }
  {
    std::vector<TarMember> m = GoodMembers();
    m.erase(m.begin());
    ExpectRefused(m, "not a torchfuse cache archive");
  }
  std::ofstream(archive_, std::ios::binary) << Tar(GoodMembers()).substr(0, 1500);
  auto truncated = ImportCache(*dst_, archive_);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(std::string(truncated.status().message()).find("truncated"), std::string::npos);
  std::ofstream(archive_, std::ios::binary) << "not a tar file at all";
  EXPECT_FALSE(ImportCache(*dst_, archive_).ok());
  EXPECT_TRUE(dst_->List().empty());
  EXPECT_EQ(ImportCache(*dst_, base_ + "/missing.tar").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace torchfuse::cache
