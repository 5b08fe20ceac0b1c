#include "cache/tuning_record.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/sha256.h"

namespace torchfuse::cache {

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

Entry ToEntry(const TuningRecord& r) {
  Entry e;
  e.fields["spec_hash"] = r.key.spec_hash;
  e.fields["bucket"] = r.key.bucket;
  e.fields["gpu"] = r.key.gpu.empty() ? "-" : r.key.gpu;
  e.fields["arch"] = absl::StrCat(r.key.arch);
  e.fields["driver"] = absl::StrCat(r.key.driver);
  e.fields["kernel"] = r.kernel;
  e.fields["kind"] = r.kind;
  e.fields["variant"] = r.variant;
  e.fields["ms"] = absl::StrFormat("%.6f", r.ms);
  e.fields["tuned"] = r.tuned ? "1" : "0";
  e.fields["created"] = absl::StrCat(r.created_unix);
  e.fields["trials"] = r.trials.empty() ? "-" : r.trials;
  e.fields["phases"] = r.phases.empty() ? "-" : r.phases;
  e.payload = r.spec;
  return e;
}

absl::StatusOr<TuningRecord> TuningRecordFromEntry(const Entry& e) {
  TuningRecord r;
  r.key.spec_hash = e.Get("spec_hash");
  r.key.bucket = e.Get("bucket");
  r.key.gpu = e.Get("gpu") == "-" ? "" : e.Get("gpu");
  r.kernel = e.Get("kernel");
  r.kind = e.Get("kind");
  r.variant = e.Get("variant");
  r.trials = e.Get("trials") == "-" ? "" : e.Get("trials");
  r.phases = e.Get("phases") == "-" ? "" : e.Get("phases");
  r.tuned = e.Get("tuned") == "1";
  r.spec = e.payload;
  if (r.key.spec_hash.size() != 64 || r.key.bucket.empty() || r.variant.empty() ||
      r.kernel.empty() || (r.kind != "row" && r.kind != "elementwise") ||
      !absl::SimpleAtoi(e.Get("arch"), &r.key.arch) ||
      !absl::SimpleAtoi(e.Get("driver"), &r.key.driver) || !absl::SimpleAtod(e.Get("ms"), &r.ms) ||
      !absl::SimpleAtoi(e.Get("created"), &r.created_unix)) {
    return absl::DataLossError("malformed tuning record");
  }
  return r;
}

}  // namespace torchfuse::cache
