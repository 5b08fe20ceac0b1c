#include "common/phase_times.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include "common/env.h"

namespace torchfuse::phase {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, Total> totals;
};

Registry& TheRegistry() {
  static Registry* const r = new Registry();
  return *r;
}

}  // namespace

void Add(const char* phase, double ms) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  Total& t = r.totals[phase];
  t.ms += ms;
  ++t.count;
}

bool HostTimesOn() {
  static const bool on = [] {
    const std::optional<std::string> v = env::Get("TORCHFUSE_HOST_TIMES");
    return v.has_value() && *v != "0";
  }();
  return on;
}

std::map<std::string, Total> Totals() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.totals;
}

}  // namespace torchfuse::phase
