#include "cache/archive.h"

#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cache/files.h"
#include "cache/sha256.h"
#include "nlohmann/json.hpp"

namespace torchfuse::cache {
namespace {

constexpr char kManifest[] = "torchfuse-cache-archive.json";
constexpr char kArchiveFormat[] = "torchfuse-cache-archive";
constexpr int kArchiveVersion = 1;
constexpr size_t kBlock = 512;

// ---- ustar --------------------------------------------------------------------------------

void Octal(char* field, size_t width, uint64_t value) {
  // width - 1 digits and a NUL.
  std::string digits(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && value > 0; value >>= 3) {
    digits[i] = static_cast<char>('0' + (value & 7));
  }
  std::memcpy(field, digits.data(), width - 1);
  field[width - 1] = '\0';
}

std::string Header(const std::string& name, uint64_t size, int64_t mtime) {
  std::string h(kBlock, '\0');
  std::memcpy(&h[0], name.data(), name.size());  // name[100]; callers keep names short
  Octal(&h[100], 8, 0644);                       // mode
  Octal(&h[108], 8, 0);                          // uid
  Octal(&h[116], 8, 0);                          // gid
  Octal(&h[124], 12, size);
  Octal(&h[136], 12, static_cast<uint64_t>(mtime));
  std::memset(&h[148], ' ', 8);  // checksum field counts as spaces while summing
  h[156] = '0';                  // regular file
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  Octal(&h[148], 7, sum);
  h[155] = ' ';
  return h;
}

absl::StatusOr<uint64_t> ParseOctal(absl::string_view field) {
  uint64_t v = 0;
  bool any = false;
  for (char c : field) {
    if (c == '\0' || c == ' ') {
      if (any) break;
      continue;
    }
    if (c < '0' || c > '7') return absl::DataLossError("bad number in a tar header");
    v = v * 8 + static_cast<uint64_t>(c - '0');
    any = true;
  }
  return v;
}

struct Member {
  std::string name;
  std::string data;
};

// Every member of a ustar archive; refuses what is not a plain file.
absl::StatusOr<std::vector<Member>> ReadTar(const std::string& bytes) {
  std::vector<Member> out;
  size_t pos = 0;
  while (true) {
    if (pos + kBlock > bytes.size()) return absl::DataLossError("truncated tar archive");
    const absl::string_view h(bytes.data() + pos, kBlock);
    if (h.find_first_not_of('\0') == absl::string_view::npos) return out;  // end marker
    unsigned sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    auto want = ParseOctal(h.substr(148, 8));
    if (!want.ok() || *want != sum) return absl::DataLossError("tar header checksum mismatch");
    if (h.substr(257, 5) != "ustar") return absl::DataLossError("not a ustar archive");
    std::string name(h.substr(0, 100).data(), strnlen(h.data(), 100));
    const std::string prefix(h.substr(345, 155).data(), strnlen(h.data() + 345, 155));
    if (!prefix.empty()) name = prefix + "/" + name;
    const char type = h[156];
    if (type != '0' && type != '\0') {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", name, "' is not a plain file (tar type '", std::string(1, type),
                       "')"));
    }
    auto size = ParseOctal(h.substr(124, 12));
    if (!size.ok()) return size.status();
    pos += kBlock;
    if (*size > bytes.size() - pos) return absl::DataLossError("truncated tar archive");
    out.push_back({name, bytes.substr(pos, *size)});
    pos += (*size + kBlock - 1) / kBlock * kBlock;
  }
}

// ---- entries ---------------------------------------------------------------------------------

// The kind of a cache path "v<version>/<bin|tune>/<64 hex digits>"; refuses anything else.
absl::StatusOr<EntryKind> KindOfPath(const std::string& path, int* version) {
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("path '", path, "' is not a cache entry (v<N>/bin|tune/<key>); refused"));
  };
  if (parts.size() != 3 || parts[0].size() < 2 || parts[0][0] != 'v' ||
      !absl::SimpleAtoi(parts[0].substr(1), version) || parts[2].size() != 64 ||
      parts[2].find_first_not_of("0123456789abcdef") != std::string::npos) {
    return bad();
  }
  if (parts[1] == EntryKindDir(EntryKind::kBinary)) return EntryKind::kBinary;
  if (parts[1] == EntryKindDir(EntryKind::kTuning)) return EntryKind::kTuning;
  return bad();
}

}  // namespace

std::string ArchiveReport::ToString() const {
  return absl::StrCat(binaries, " binary(ies) and ", tuning_records, " tuning record(s), ", bytes,
                      " bytes", unchanged > 0 ? absl::StrCat(" (", unchanged, " already here)")
                                              : std::string());
}

absl::StatusOr<ArchiveReport> ExportCache(const DiskCache& cache, const std::string& path) {
  ArchiveReport report;
  nlohmann::json entries = nlohmann::json::array();
  std::vector<std::pair<std::string, std::string>> files;
  for (const ListedEntry& e : cache.List()) {
    if (!e.entry) continue;  // unreadable: not shipped
    std::string bytes = EncodeEntry(*e.entry);  // the file's bytes: encoding is deterministic
    const std::string rel = absl::StrCat("v", kFormatVersion, "/", EntryKindDir(e.kind), "/", e.key);
    entries.push_back({{"path", rel}, {"bytes", bytes.size()}, {"sha256", Sha256Hex(bytes)}});
    ++(e.kind == EntryKind::kBinary ? report.binaries : report.tuning_records);
    report.bytes += static_cast<int64_t>(bytes.size());
    files.emplace_back(rel, std::move(bytes));
  }
  const nlohmann::json manifest = {{"format", kArchiveFormat},
                                   {"version", kArchiveVersion},
                                   {"cache_format", kFormatVersion},
                                   {"entries", std::move(entries)}};
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    auto put = [&](const std::string& name, const std::string& data) {
      out << Header(name, data.size(), now) << data
          << std::string((kBlock - data.size() % kBlock) % kBlock, '\0');
    };
    put(kManifest, manifest.dump(1));
    for (const auto& [name, data] : files) put(name, data);
    out << std::string(2 * kBlock, '\0');
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return report;
}

absl::StatusOr<ArchiveReport> ImportCache(const DiskCache& cache, const std::string& path) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' refused: ", why));
  };
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  auto members = ReadTar(*bytes);
  if (!members.ok()) return refuse(members.status().message());
  if (members->empty() || members->front().name != kManifest) {
    return refuse(absl::StrCat("not a torchfuse cache archive (no ", kManifest, " first)"));
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(members->front().data);
  } catch (const nlohmann::json::exception& e) {
    return refuse(absl::StrCat("unreadable manifest: ", e.what()));
  }
  if (manifest.value("format", std::string()) != kArchiveFormat ||
      manifest.value("version", -1) != kArchiveVersion) {
    return refuse("not a torchfuse cache archive of a version this build reads");
  }
  if (manifest.value("cache_format", -1) != kFormatVersion) {
    return refuse(absl::StrCat("its entries are of cache format ", manifest.value("cache_format", -1),
                               ", this build reads format ", kFormatVersion,
                               " (precompile again with this version)"));
  }
  std::map<std::string, std::pair<uint64_t, std::string>> expected;  // path -> (bytes, sha256)
  try {
    for (const nlohmann::json& e : manifest.at("entries")) {
      expected[e.at("path").get<std::string>()] = {e.at("bytes").get<uint64_t>(),
                                                   e.at("sha256").get<std::string>()};
    }
  } catch (const nlohmann::json::exception& e) {
    return refuse(absl::StrCat("malformed manifest: ", e.what()));
  }
  // Check everything before writing anything.
  struct Checked {
    EntryKind kind;
    std::string key;
    const std::string* data;
    Entry entry;
  };
  std::vector<Checked> checked;
  for (size_t i = 1; i < members->size(); ++i) {
    const Member& m = (*members)[i];
    int version = 0;
    auto kind = KindOfPath(m.name, &version);
    if (!kind.ok()) return refuse(kind.status().message());
    if (version != kFormatVersion) {
      return refuse(absl::StrCat("entry '", m.name, "' is of cache format ", version));
    }
    auto it = expected.find(m.name);
    if (it == expected.end()) return refuse(absl::StrCat("entry '", m.name, "' is not in the manifest"));
    if (it->second.first != m.data.size() || it->second.second != Sha256Hex(m.data)) {
      return refuse(absl::StrCat("entry '", m.name, "' does not match its checksum"));
    }
    absl::StatusOr<Entry> entry = DecodeEntry(m.data);
    if (!entry.ok()) return refuse(absl::StrCat("entry '", m.name, "': ", entry.status().message()));
    expected.erase(it);
    checked.push_back({*kind, m.name.substr(m.name.rfind('/') + 1), &m.data, std::move(*entry)});
  }
  if (!expected.empty()) {
    return refuse(absl::StrCat("entry '", expected.begin()->first, "' of the manifest is missing"));
  }
  ArchiveReport report;
  for (const Checked& c : checked) {
    if (absl::StatusOr<std::string> have = ReadFile(cache.PathOf(c.kind, c.key));
        have.ok() && *have == *c.data) {
      ++report.unchanged;
    } else if (absl::Status s = cache.Write(c.kind, c.key, c.entry); !s.ok()) {
      return s;
    }
    ++(c.kind == EntryKind::kBinary ? report.binaries : report.tuning_records);
    report.bytes += static_cast<int64_t>(c.data->size());
  }
  return report;
}

}  // namespace torchfuse::cache
