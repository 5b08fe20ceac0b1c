// TORCHFUSE_DUMP: what every compile shows of itself.
//
// TORCHFUSE_DUMP is a comma-separated subset of graph,fusion,source,tuning (or "all"). Each dump
// goes to stderr under a "== torchfuse dump: <what> <name>" header, or, with
// TORCHFUSE_DUMP_DIR set, to a file of its own there: <pid>-<seq>-<what>-<name>.<txt|cu>.
#ifndef TORCHFUSE_COMMON_DUMP_H_
#define TORCHFUSE_COMMON_DUMP_H_

#include <string>

namespace torchfuse::dump {

enum class What { kGraph, kFusion, kSource, kTuning };

/// Whether `what` is asked for. Reads the environment on every call (cheap), so tests and
/// long-lived processes may change it.
bool Enabled(What what);

/// Dumps `text` as `what` of `name` (a kernel, a specialization) if asked for. A write that
/// fails is reported once on stderr.
void Write(What what, const std::string& name, const std::string& text);

/// The word for `what` ("graph").
const char* Name(What what);

/// While one lives, this thread dumps nothing (work done again only to look at it).
class Quiet {
 public:
  Quiet();
  ~Quiet();
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;
};

}  // namespace torchfuse::dump

#endif  // TORCHFUSE_COMMON_DUMP_H_
