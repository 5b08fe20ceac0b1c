// Ahead-of-time compilation and the management of the on-disk cache.
#ifndef TORCHFUSE_RUNTIME_PRECOMPILE_H_
#define TORCHFUSE_RUNTIME_PRECOMPILE_H_

#include <torch/script.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/archive.h"
#include "cache/tuning_record.h"
#include "frontend_torch/model_source.h"
#include "graph/graph.h"
#include "runtime/options.h"

namespace torchfuse {

/// What Precompile or a cache rebuild did.
struct PrecompileReport {
  int kernels = 0;               // kernels the model needs
  int arch = 0;                  // compiled for
  bool on_gpu = false;           // ran (and tuned) on a GPU, else compiled only
  int64_t nvrtc_compiles = 0;    // images NVRTC compiled
  int64_t disk_hits = 0;         // images found in the disk cache
  int64_t tuning_runs = 0;       // kernels tuned
  std::vector<std::string> kernel_names;
  std::vector<std::string> variants;  // chosen variant per kernel
  std::string ToString() const;
};

/// Compiles and tunes everything `module` needs for `inputs`, into the disk cache. With a GPU
/// (and `arch` absent or that GPU's), the module runs once on random inputs on it, which
/// compiles and tunes each kernel. Otherwise `arch` is required: the kernels are compiled for
/// it and the heuristic's variants recorded as such (tuning waits for a GPU). Inputs with
/// symbolic sizes are never run: their kernels (a row length of any size) are compiled for
/// `arch`, or the GPU's.
absl::StatusOr<PrecompileReport> Precompile(const torch::jit::Module& module,
                                            const std::vector<graph::TensorType>& inputs,
                                            const Options& options = {},
                                            std::optional<int> arch = std::nullopt);
/// As above, for a model of any origin (torch.export archive, FX graph).
absl::StatusOr<PrecompileReport> Precompile(const frontend::ModelSource& source,
                                            const std::vector<graph::TensorType>& inputs,
                                            const Options& options = {},
                                            std::optional<int> arch = std::nullopt);

/// Compiles and tunes the plan for symbolic `specs` (`f32[B,T]`: one plan for every size, as
/// `Options::input_specs` declares it) at each of `bindings` (static specs, one per
/// combination of sizes): on a GPU, the plan runs once per binding, which tunes each bucket of
/// row lengths its kernels meet, so that a deployment calling it with these sizes tunes
/// nothing. Without a GPU, as Precompile with `specs`.
absl::StatusOr<PrecompileReport> PrecompileForSizes(
    const frontend::ModelSource& source, const std::vector<graph::TensorType>& specs,
    const std::vector<std::vector<graph::TensorType>>& bindings, const Options& options = {},
    std::optional<int> arch = std::nullopt);

/// One tuning record or binary of the cache, for listings.
struct CacheListing {
  std::string type;      // "tuning" or "binary"
  std::string kernel;
  std::string bucket;    // tuning records only
  int arch = 0;
  std::string gpu;       // tuning records: "" when recorded without a GPU
  std::string variant;   // tuning records only
  double ms = -1;        // the variant's time; < 0 when not tuned
  bool tuned = false;
  int64_t age_seconds = 0;
  int64_t size_bytes = 0;
  std::string problem;   // for an unreadable entry: why
  std::string path;
  std::optional<cache::TuningRecord> record;  // tuning records: the whole record
};

/// The cache directory `options` use.
std::string CachePath(const Options& options = {});
/// Every entry of the cache, tuning records first.
absl::StatusOr<std::vector<CacheListing>> CacheList(const Options& options = {});
/// The listing as a table.
std::string FormatCacheListing(const std::vector<CacheListing>& entries);
/// The listing as a JSON document: {"format": "torchfuse-cache-listing", "version",
/// "directory", "entries": [{"type", "kernel", "arch", "path", "size_bytes", "age_seconds",
/// "problem"?, "record"?: the tuning record's document}]}.
std::string CacheListingJson(const std::vector<CacheListing>& entries, const std::string& dir);
/// Removes every entry.
absl::Status CacheClear(const Options& options = {});
/// Packs the cache into the tar file `path`, or checks and unpacks one (cache/archive.h).
absl::StatusOr<cache::ArchiveReport> CacheExport(const std::string& path,
                                                 const Options& options = {});
absl::StatusOr<cache::ArchiveReport> CacheImport(const std::string& path,
                                                 const Options& options = {});
/// Re-compiles and re-tunes every recorded kernel spec on this machine's GPU (old records and
/// binaries are replaced). Without a GPU, re-compiles the binaries of every record for its
/// arch, or for `arch` where given, keeping the records.
absl::StatusOr<PrecompileReport> CacheRebuild(const Options& options = {},
                                              std::optional<int> arch = std::nullopt);

/// Decisions timed outside torchfuse's kernels (the attention rewrite's choice of form, made
/// in Python), kept with the tuning records: a record of kind `kind` whose spec is `problem`
/// (a text that names the sizes, strides and dtypes timed), keyed by it and by GPU `ordinal`'s
/// name, arch and driver, so that a later process on that GPU does not time them again.
/// Listed, exported and cleared with the other records; a rebuild drops them (the next use
/// times them anew). RecordedChoice: the recorded variant, or nullopt (none, no cache, no GPU).
std::optional<std::string> RecordedChoice(const Options& options, const std::string& kind,
                                          const std::string& problem, int ordinal);
/// Records `variant` (median `ms`, every candidate's `trials` as "name=ms;...") for them.
absl::Status RecordChoice(const Options& options, const std::string& kind,
                          const std::string& problem, int ordinal, const std::string& variant,
                          double ms, const std::string& trials);

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_PRECOMPILE_H_
