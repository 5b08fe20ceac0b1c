#include "graph/dtype.h"

#include <gtest/gtest.h>

namespace torchfuse::graph {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kBool}) {
    auto parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(ParseDType("f8").ok());
}

TEST(DTypeTest, PromotesLikePyTorch) {
  EXPECT_EQ(PromoteTypes(DType::kF16, DType::kBF16), DType::kF32);
  EXPECT_EQ(PromoteTypes(DType::kI32, DType::kF16), DType::kF16);
  EXPECT_EQ(PromoteTypes(DType::kBool, DType::kI32), DType::kI32);
  EXPECT_EQ(PromoteTypes(DType::kI64, DType::kI32), DType::kI64);
  EXPECT_EQ(PromoteTypes(DType::kF32, DType::kF64), DType::kF64);
}

TEST(DTypeTest, ScalarsDoNotWidenTensors) {
  // bf16 tensor * python float stays bf16; f32 tensor * f64 zero-dim tensor stays f32.
  EXPECT_EQ(ResultType({{DType::kBF16, OperandPriority::kDimensioned},
                        {DType::kF64, OperandPriority::kWrappedScalar}}),
            DType::kBF16);
  EXPECT_EQ(ResultType({{DType::kF32, OperandPriority::kDimensioned},
                        {DType::kF64, OperandPriority::kZeroDim}}),
            DType::kF32);
  // int tensor * python float -> default float dtype.
  EXPECT_EQ(ResultType({{DType::kI64, OperandPriority::kDimensioned},
                        {DType::kF64, OperandPriority::kWrappedScalar}}),
            DType::kF32);
  // int tensor * f64 zero-dim tensor -> f64 (category is higher, so the zero-dim type wins).
  EXPECT_EQ(ResultType({{DType::kI32, OperandPriority::kDimensioned},
                        {DType::kF64, OperandPriority::kZeroDim}}),
            DType::kF64);
  // bool tensor + python int -> i64.
  EXPECT_EQ(ResultType({{DType::kBool, OperandPriority::kDimensioned},
                        {DType::kI64, OperandPriority::kWrappedScalar}}),
            DType::kI64);
}

TEST(DTypeTest, ComputeTypeWidensHalfTypes) {
  EXPECT_EQ(ComputeDType(DType::kBF16), DType::kF32);
  EXPECT_EQ(ComputeDType(DType::kF16), DType::kF32);
  EXPECT_EQ(ComputeDType(DType::kF64), DType::kF64);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2);
}

}  // namespace
}  // namespace torchfuse::graph
