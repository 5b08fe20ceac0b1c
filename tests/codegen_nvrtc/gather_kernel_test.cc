#include "codegen_nvrtc/gather_kernel.h"

#include <gtest/gtest.h>

#include <set>

#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {
namespace {

TEST(GatherKernelTest, NvrtcCompilesEveryUnitAndIndexType) {
  std::set<std::string> names;
  for (int unit : {1, 2, 4, 8, 16}) {
    for (int index : {4, 8}) {
      auto k = EmitGatherKernel(unit, index);
      ASSERT_TRUE(k.ok()) << k.status();
      names.insert(k->name);
      EXPECT_NE(k->source.find("__trap()"), std::string::npos);  // bad indices stop it
      auto image = CompileCuda(k->source, k->name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << "\n" << k->source;
    }
  }
  EXPECT_EQ(names.size(), 10u);  // one kernel per unit and index type
}

// `table[indices]` (aten::index) counts negative indices from the end, where an embedding's
// are out of range: a kernel of its own name, which compiles for every unit and index type.
TEST(GatherKernelTest, IndexingCountsNegativeIndicesFromTheEndAndEmbeddingsDoNot) {
  std::set<std::string> names;
  for (int unit : {1, 2, 4, 8, 16}) {
    for (int index : {4, 8}) {
      auto rows = EmitGatherKernel(unit, index, /*negative_from_end=*/true);
      auto lookup = EmitGatherKernel(unit, index);
      ASSERT_TRUE(rows.ok() && lookup.ok());
      EXPECT_NE(rows->source.find("if (t < 0) t += rows;"), std::string::npos);
      EXPECT_EQ(lookup->source.find("t += rows"), std::string::npos);
      EXPECT_NE(rows->source.find("__trap()"), std::string::npos);
      EXPECT_NE(rows->name, lookup->name);
      EXPECT_NE(rows->hash, lookup->hash);
      names.insert(rows->name);
      auto image = CompileCuda(rows->source, rows->name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << "\n" << rows->source;
    }
  }
  EXPECT_EQ(names.size(), 10u);
}

TEST(GatherKernelTest, SourceIsDeterministicAndHoldsNoSizes) {
  auto a = EmitGatherKernel(16, 8), b = EmitGatherKernel(16, 8);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->source, b->source);
  EXPECT_EQ(a->hash, b->hash);
  EXPECT_NE(a->hash, EmitGatherKernel(16, 4)->hash);
  // Row lengths and counts are parameters: one binary serves every table and index shape.
  for (const char* size : {"768", "50257", "96"}) {
    EXPECT_EQ(a->source.find(size), std::string::npos) << size;
  }
}

TEST(GatherKernelTest, RefusesUnitsAndIndexTypesItHasNoCodeFor) {
  EXPECT_FALSE(EmitGatherKernel(3, 8).ok());
  EXPECT_FALSE(EmitGatherKernel(32, 8).ok());
  EXPECT_FALSE(EmitGatherKernel(16, 2).ok());
}

TEST(GatherKernelTest, NvrtcCompilesTheScatterAddForEveryElementAndIndexType) {
  std::set<std::string> names;
  for (int element : {4, 8}) {
    for (int index : {4, 8}) {
      auto k = EmitScatterAddKernel(element, index);
      ASSERT_TRUE(k.ok()) << k.status();
      names.insert(k->name);
      EXPECT_NE(k->source.find("atomicAdd"), std::string::npos);
      EXPECT_NE(k->source.find("__trap()"), std::string::npos);  // bad indices stop it
      EXPECT_NE(k->source.find("t += rows"), std::string::npos);  // negative ones count back
      auto image = CompileCuda(k->source, k->name, 90);
      ASSERT_TRUE(image.ok()) << image.status() << "\n" << k->source;
    }
  }
  EXPECT_EQ(names.size(), 4u);
  EXPECT_NE(EmitScatterAddKernel(4, 8)->hash, EmitScatterAddKernel(8, 8)->hash);
  // No atomic add of 16-bit or integer elements here: those stay torch's.
  EXPECT_FALSE(EmitScatterAddKernel(2, 8).ok());
  EXPECT_FALSE(EmitScatterAddKernel(4, 2).ok());
}

}  // namespace
}  // namespace torchfuse::codegen
