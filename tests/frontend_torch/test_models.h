// The generated TorchScript test models (see models/make_models.py).
#ifndef TORCHFUSE_TESTS_FRONTEND_TORCH_TEST_MODELS_H_
#define TORCHFUSE_TESTS_FRONTEND_TORCH_TEST_MODELS_H_

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <algorithm>

#include "absl/strings/str_split.h"
#include "graph/graph.h"

namespace torchfuse::testing {

/// One line of the manifest: a model file and its example input types.
struct TestModel {
  std::string name;
  std::string path;
  std::vector<graph::TensorType> inputs;
};

/// Path of a generated model file.
inline std::string ModelPath(const std::string& file) {
  return std::string(TF_TEST_MODELS_DIR) + "/" + file;
}

/// Every model listed in the manifest.
inline std::vector<TestModel> ReadManifest() {
  std::vector<TestModel> out;
  std::ifstream f(ModelPath("manifest.txt"));
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() != 3) continue;
    TestModel m{parts[0], parts[1], {}};
    for (absl::string_view spec : absl::StrSplit(parts[2], ';')) {
      m.inputs.push_back(*graph::ParseTensorType(spec));
    }
    out.push_back(std::move(m));
  }
  return out;
}

/// gtest prints a parameter by its name.
inline void PrintTo(const TestModel& m, std::ostream* os) { *os << m.name; }

/// gtest parameter names.
inline std::string ModelName(const ::testing::TestParamInfo<TestModel>& info) {
  return info.param.name;
}

/// The tensors of a module's result (a tensor or a tuple of tensors).
inline std::vector<at::Tensor> Flatten(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> out;
  for (const c10::IValue& e : v.toTuple()->elements()) out.push_back(e.toTensor());
  return out;
}

/// The relative error the GPU tests allow a result of dtype `t` against eager: f16 and bf16
/// results round at the dtype (torchfuse computes in f32 between), f32 ones differ in order.
inline double Tolerance(at::ScalarType t) {
  return (t == at::kHalf || t == at::kBFloat16) ? 1e-2 : 1e-5;
}

/// ||got - want|| / ||want||, in f64 on the CPU (0 for empty tensors).
inline double RelativeError(const at::Tensor& got, const at::Tensor& want) {
  if (want.numel() == 0) return 0.0;
  at::Tensor g = got.to(at::kDouble).cpu(), w = want.to(at::kDouble).cpu();
  return (g - w).norm().item<double>() / std::max(w.norm().item<double>(), 1e-30);
}

}  // namespace torchfuse::testing

#endif  // TORCHFUSE_TESTS_FRONTEND_TORCH_TEST_MODELS_H_
