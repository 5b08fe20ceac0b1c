#include "codegen_nvrtc/cuda_writer.h"

#include <gtest/gtest.h>

namespace torchfuse::codegen {
namespace {

TEST(CudaWriterTest, ScopesIndentAndCloseBraces) {
  CudaWriter w;
  {
    CudaWriter::Scope s(&w, "struct A", ";");
    w.Line("int x = ", 3, ";");
    {
      CudaWriter::Scope inner(&w, "void f()");
      w.Line("return;");
    }
  }
  EXPECT_EQ(w.str(), "struct A {\n  int x = 3;\n  void f() {\n    return;\n  }\n};\n");
}

TEST(CudaWriterTest, FreshNamesCountPerPrefix) {
  CudaWriter w;
  EXPECT_EQ(w.FreshName("v"), "v0");
  EXPECT_EQ(w.FreshName("v"), "v1");
  EXPECT_EQ(w.FreshName("s"), "s0");
}

}  // namespace
}  // namespace torchfuse::codegen
