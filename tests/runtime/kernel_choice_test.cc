// Which kernel a call would run before any tuning, and whether that call waits for its
// compile: what the kernels compiled ahead of a model's first call are queued as.
#include "runtime/kernel_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autotune/tuning_store.h"
#include "cache/tuning_record.h"

namespace torchfuse::runtime {
namespace {

// A space of two kernel variants, the heuristic's first, and the group's torch ops where
// `with_torch`; each variant's kernel is a distinct source no process has compiled.
VariantSpace Space(const std::string& spec_hash, bool with_torch) {
  VariantSpace space;
  space.kind = "elementwise";
  space.kernel_name = "tf_choice_" + spec_hash;
  space.spec_hash = spec_hash;
  space.bucket = "n<=1024";
  space.spec = [] { return std::string(); };
  space.candidates = {"v0", "v1"};
  if (with_torch) space.candidates.push_back(kTorchVariant);
  space.make = [spec_hash](const std::string& variant)
      -> absl::StatusOr<autotune::LaunchCandidate> {
    autotune::LaunchCandidate launch;
    if (variant == kTorchVariant) {
      launch.torch = true;
      return launch;
    }
    launch.kernel.name = "tf_choice_" + spec_hash + "_" + variant;
    launch.kernel.source = "extern \"C\" __global__ void " + launch.kernel.name +
                           "(float* x) { x[0] = 1.0f; }\n";
    return launch;
  };
  return space;
}

ChoiceContext Context(bool lazy) {
  ChoiceContext context;
  context.tune.enabled = true;
  context.tune.background = true;
  context.tune.lazy = lazy;
  context.gpu = "test GPU";
  context.arch = 90;
  return context;
}

struct Ahead {
  std::string kernel;
  bool awaited = false;
};

Ahead UntunedOf(const VariantSpace& space, const ChoiceContext& context) {
  bool awaited = false;
  absl::StatusOr<autotune::LaunchCandidate> launch = UntunedLaunch(space, context, &awaited);
  EXPECT_TRUE(launch.ok()) << launch.status();
  return {launch.ok() ? launch->kernel.name : "", awaited};
}

TEST(KernelChoiceTest, OnlyALazyGroupsHeuristicKernelIsNotAwaited) {
  autotune::ResetProcessTuningRecords();
  // Lazy tuning with the group's torch ops among the candidates: they run until the
  // heuristic's kernel has compiled, so no call waits for it.
  Ahead lazy = UntunedOf(Space("lazy", true), Context(true));
  EXPECT_EQ(lazy.kernel, "tf_choice_lazy_v0");
  EXPECT_FALSE(lazy.awaited);

  // Background tuning: the first call runs the heuristic's kernel.
  EXPECT_TRUE(UntunedOf(Space("background", true), Context(false)).awaited);
  // No torch ops to run meanwhile.
  EXPECT_TRUE(UntunedOf(Space("no_torch", false), Context(true)).awaited);
  // The user fixed the variant; tuning is off; tuning runs in the call (sync).
  ChoiceContext forced = Context(true);
  forced.forced = true;
  EXPECT_TRUE(UntunedOf(Space("forced", true), forced).awaited);
  ChoiceContext off = Context(true);
  off.tune.enabled = false;
  EXPECT_TRUE(UntunedOf(Space("off", true), off).awaited);
  ChoiceContext sync = Context(true);
  sync.tune.background = false;
  EXPECT_TRUE(UntunedOf(Space("sync", true), sync).awaited);
}

TEST(KernelChoiceTest, ATunedRecordIsAwaitedAndTheHeuristicsRecordIsNot) {
  autotune::ResetProcessTuningRecords();
  const ChoiceContext context = Context(true);
  for (bool tuned : {false, true}) {
    const std::string hash = tuned ? "recorded_tuned" : "recorded_heuristic";
    const VariantSpace space = Space(hash, true);
    cache::TuningRecord record;
    record.key = {space.spec_hash, space.bucket, context.gpu, context.arch, context.driver};
    record.kernel = space.kernel_name;
    record.kind = space.kind;
    record.variant = "v1";
    record.tuned = tuned;
    autotune::SaveRecord(record, /*disk=*/nullptr);
    const Ahead ahead = UntunedOf(space, context);
    // A tuned record decides, and the first call runs its kernel; the heuristic's record
    // leaves the choice to tuning, lazily.
    EXPECT_EQ(ahead.kernel,
              tuned ? "tf_choice_recorded_tuned_v1" : "tf_choice_recorded_heuristic_v0");
    EXPECT_EQ(ahead.awaited, tuned);
  }
  autotune::ResetProcessTuningRecords();
}

}  // namespace
}  // namespace torchfuse::runtime
