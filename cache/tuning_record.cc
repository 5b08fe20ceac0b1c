#include "cache/tuning_record.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cache/sha256.h"
#include "nlohmann/json.hpp"

namespace torchfuse::cache {
namespace {

using Json = nlohmann::json;

// "variant=0.0123;other=compile failed" as [{"variant", "ms"} or {"variant", "error"}].
Json TrialsJson(const std::string& trials) {
  Json out = Json::array();
  if (trials.empty()) return out;
  for (absl::string_view t : absl::StrSplit(trials, ';')) {
    const size_t eq = t.find('=');
    Json trial;
    trial["variant"] = std::string(t.substr(0, eq));
    const std::string outcome = eq == absl::string_view::npos ? "" : std::string(t.substr(eq + 1));
    double ms = 0;
    if (absl::SimpleAtod(outcome, &ms)) {
      trial["ms"] = ms;
    } else {
      trial["error"] = outcome;
    }
    out.push_back(std::move(trial));
  }
  return out;
}

std::string TrialsText(const Json& trials) {
  std::vector<std::string> parts;
  for (const Json& t : trials) {
    parts.push_back(absl::StrCat(t.at("variant").get<std::string>(), "=",
                                 t.contains("ms") ? absl::StrCat(t.at("ms").get<double>())
                                                  : t.value("error", std::string())));
  }
  return absl::StrJoin(parts, ";");
}

}  // namespace

std::string TuningKey::Hash() const {
  return Sha256()
      .Field(spec_hash)
      .Field(bucket)
      .Field(gpu)
      .Field(absl::StrCat(arch))
      .Field(absl::StrCat(driver))
      .Field(absl::StrCat(kFormatVersion))
      .HexDigest();
}

Json TuningRecordToJson(const TuningRecord& r) {
  Json j;
  j["format"] = "torchfuse-tuning";
  j["version"] = kFormatVersion;
  j["key"] = {{"spec_hash", r.key.spec_hash}, {"bucket", r.key.bucket}, {"gpu", r.key.gpu},
              {"arch", r.key.arch},           {"driver", r.key.driver}};
  j["kernel"] = r.kernel;
  j["kind"] = r.kind;
  j["variant"] = r.variant;
  if (r.ms >= 0) j["ms"] = r.ms;
  j["tuned"] = r.tuned;
  j["created_unix"] = r.created_unix;
  j["trials"] = TrialsJson(r.trials);
  j["phases"] = r.phases;
  j["spec"] = r.spec;
  return j;
}

absl::StatusOr<TuningRecord> TuningRecordFromJson(absl::string_view text) {
  TuningRecord r;
  try {
    const Json j = Json::parse(text.begin(), text.end());
    if (j.value("format", std::string()) != "torchfuse-tuning" ||
        j.value("version", -1) != kFormatVersion) {
      return absl::DataLossError("not a tuning record of this format version");
    }
    const Json& key = j.at("key");
    r.key.spec_hash = key.at("spec_hash").get<std::string>();
    r.key.bucket = key.at("bucket").get<std::string>();
    r.key.gpu = key.at("gpu").get<std::string>();
    r.key.arch = key.at("arch").get<int>();
    r.key.driver = key.at("driver").get<int>();
    r.kernel = j.at("kernel").get<std::string>();
    r.kind = j.at("kind").get<std::string>();
    r.variant = j.at("variant").get<std::string>();
    r.ms = j.value("ms", -1.0);
    r.tuned = j.at("tuned").get<bool>();
    r.created_unix = j.at("created_unix").get<int64_t>();
    r.trials = TrialsText(j.value("trials", Json::array()));
    r.phases = j.value("phases", std::string());
    r.spec = j.at("spec").get<std::string>();
  } catch (const Json::exception& e) {
    return absl::DataLossError(absl::StrCat("malformed tuning record: ", e.what()));
  }
  if (r.key.spec_hash.size() != 64 || r.key.bucket.empty() || r.variant.empty() ||
      r.kernel.empty() || (r.kind != "row" && r.kind != "elementwise" && r.kind != "column" &&
       r.kind != "attention")) {
    return absl::DataLossError("malformed tuning record");
  }
  return r;
}

Entry ToEntry(const TuningRecord& r) {
  Entry e;
  e.fields["kernel"] = r.kernel;  // for listings that do not parse the record
  e.payload = TuningRecordToJson(r).dump(/*indent=*/1);
  return e;
}

absl::StatusOr<TuningRecord> TuningRecordFromEntry(const Entry& e) {
  return TuningRecordFromJson(e.payload);
}

}  // namespace torchfuse::cache
