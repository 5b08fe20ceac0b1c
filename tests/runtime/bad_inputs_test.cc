// What a compiled module does with inputs it was not compiled for, or that no compiler would
// expect: other dtypes and ranks, tensors on the CPU or on another GPU, non-tensor arguments,
// empty and one-element tensors, tensors of 2^31 elements and more, eight threads calling at
// once, and a kernel that faults. Each call gives eager's answer or raises what eager raises
// (a c10::Error, a Python exception through the bindings); none ends the process.
#include <gtest/gtest.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/compiled_module.h"
#include "../frontend_torch/test_models.h"

namespace torchfuse {
namespace {

using testing::Flatten;
using testing::RelativeError;
using testing::Tolerance;

at::Tensor Rand(const std::vector<int64_t>& sizes, at::ScalarType dtype = at::kFloat,
                at::Device device = at::kCUDA) {
  return at::randn(sizes, at::TensorOptions().device(device)).to(dtype);
}

torch::jit::Module Define(const std::string& source, int64_t width = 0) {
  torch::jit::Module m("BadInputs");
  if (width > 0) {
    m.register_parameter("bias", Rand({width}), false);
  }
  m.define(source);
  m.eval();
  return m;
}

const char* kGeluSoftmax =
    "def forward(self, x):\n"
    "    y = x + self.bias\n"
    "    g = y * 0.5 * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))\n"
    "    return (g, torch.softmax(g, -1), g.sum(0))\n";

// The compiled module's outputs for `inputs` are eager's.
void ExpectEager(CompiledModule& c, torch::jit::Module& m, const std::vector<c10::IValue>& in) {
  std::vector<at::Tensor> got = Flatten(c.forward(in));
  std::vector<at::Tensor> want = Flatten(m.forward(in));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << "output " << i;
    EXPECT_EQ(got[i].device(), want[i].device()) << "output " << i;
    if (want[i].numel() > 0) {
      EXPECT_LE(RelativeError(got[i], want[i]), Tolerance(want[i].scalar_type()))
          << "output " << i;
    }
  }
}

class BadInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(BadInputsTest, OtherDtypesAndRanksCompileAgainOrRaiseAsEagerDoes) {
  torch::jit::Module m = Define(kGeluSoftmax, 512);
  m.to(at::kCUDA);
  CompiledModule c = Compile(m);
  ExpectEager(c, m, {Rand({64, 512})});
  // Another dtype (promoted against the f32 bias, as in eager) and another rank: new kernels.
  ExpectEager(c, m, {Rand({64, 512}, at::kBFloat16)});
  ExpectEager(c, m, {Rand({64, 512}, at::kHalf)});
  ExpectEager(c, m, {Rand({3, 5, 512})});
  ExpectEager(c, m, {Rand({512})});
  // Integers: eager promotes them to float against the bias.
  ExpectEager(c, m, {at::randint(-5, 5, {8, 512}, at::TensorOptions().device(at::kCUDA))});
  // Shapes that do not broadcast against the bias: eager's error, then the module still works.
  EXPECT_THROW(c.forward({Rand({64, 500})}), std::exception);
  EXPECT_THROW(c.forward({Rand({64, 500})}), std::exception);
  ExpectEager(c, m, {Rand({64, 512})});
  EXPECT_EQ(c.last_call_stats().eager_calls, 0);
  EXPECT_EQ(c.last_call_stats().torch_ops, 0);
}

TEST_F(BadInputsTest, CpuTensorsNonTensorsAndMixedDevicesRunAsEagerDoes) {
  torch::jit::Module m = Define(
      "def forward(self, x, y, s: float, k: int):\n"
      "    return torch.sigmoid(x * s) + y * k\n");
  CompiledModule c = Compile(m);
  // Numbers among the arguments: eager's answer.
  ExpectEager(c, m, {Rand({16, 100}), Rand({16, 100}), 2.5, int64_t{3}});
  EXPECT_EQ(c.last_call_stats().eager_calls, 1);
  // CPU tensors: eager, on the CPU.
  ExpectEager(c, m, {Rand({16, 100}, at::kFloat, at::kCPU), Rand({16, 100}, at::kFloat, at::kCPU),
                     0.5, int64_t{2}});
  // A CUDA and a CPU tensor: eager raises; so does the compiled module.
  EXPECT_THROW(c.forward({Rand({16, 100}), Rand({16, 100}, at::kFloat, at::kCPU), 0.5, int64_t{2}}),
               std::exception);
  // A CPU scalar tensor with a CUDA tensor is allowed in eager: the same answer.
  ExpectEager(c, m, {Rand({16, 100}), Rand({}, at::kFloat, at::kCPU), 0.5, int64_t{2}});
}

TEST_F(BadInputsTest, TensorsOnAnotherGpuRunThereOrRaiseAsEagerDoes) {
  if (torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "one GPU: tensors on another GPU need two";
  }
  torch::jit::Module m = Define("def forward(self, x, y):\n    return torch.tanh(x) * y + 1.0\n");
  CompiledModule c = Compile(m);
  const at::Device gpu1(at::kCUDA, 1);
  // Torch's current CUDA device.
  auto current_device = [] {
    return c10::impl::getDeviceGuardImpl(at::kCUDA)->getDevice().index();
  };
  const c10::DeviceIndex current = current_device();
  ExpectEager(c, m, {Rand({64, 300}), Rand({64, 300})});
  // Both on the second GPU: compiled for it, results there, and the current device is left as
  // it was (as eager leaves it), so that the next `at::kCUDA` tensor is made where it was.
  c.forward({Rand({64, 300}, at::kFloat, gpu1), Rand({64, 300}, at::kFloat, gpu1)});
  EXPECT_EQ(current_device(), current);
  ExpectEager(c, m, {Rand({64, 300}, at::kFloat, gpu1), Rand({64, 300}, at::kFloat, gpu1)});
  EXPECT_EQ(c.last_call_stats().eager_calls, 0);
  EXPECT_EQ(current_device(), current);
  // One on each: the call runs eagerly and gives what eager gives (ATen's error for operands
  // on two GPUs), launching nothing of its own.
  const std::vector<c10::IValue> mixed = {Rand({64, 300}), Rand({64, 300}, at::kFloat, gpu1)};
  bool eager_raises = false;
  try {
    m.forward(mixed);
  } catch (const std::exception&) {
    eager_raises = true;
  }
  if (eager_raises) {
    EXPECT_THROW(c.forward(mixed), std::exception);
  } else {
    ExpectEager(c, m, mixed);
  }
  EXPECT_EQ(c.last_call_stats().eager_calls, 1);
  EXPECT_EQ(c.last_call_stats().fused_launches, 0);
}

TEST_F(BadInputsTest, EmptyAndOneElementTensorsGiveEagersValues) {
  torch::jit::Module m = Define(
      "def forward(self, x):\n"
      "    g = torch.sigmoid(x) * x\n"
      "    return (g, torch.softmax(g, -1), torch.layer_norm(g, [g.size(-1)]), g.sum(-1), "
      "g.sum(0), g.mean(0), g.amax(-1, keepdim=True))\n");
  // The same reductions of |g|: how large the terms of each output are, the scale of the
  // rounding error of a sum whose terms cancel.
  torch::jit::Module magnitudes = Define(
      "def forward(self, x):\n"
      "    a = (torch.sigmoid(x) * x).abs()\n"
      "    one = torch.ones_like(a)\n"
      "    return (a, one, one + torch.layer_norm(a, [a.size(-1)]).abs(), a.sum(-1), a.sum(0), "
      "a.mean(0), a.amax(-1, keepdim=True))\n");
  m.to(at::kCUDA);
  CompiledModule c = Compile(m);
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{1, 1}, {1, 7}, {7, 1}, {0, 5}, {5, 0}, {0, 0}, {2, 1, 3}}) {
    for (const at::Tensor& x : {Rand(shape), Rand(shape, at::kBFloat16).transpose(0, -1)}) {
      SCOPED_TRACE(absl::StrCat(c10::toString(x.scalar_type()), c10::str(x.sizes())));
      // Eager's outputs or eager's error (amax over rows of no elements).
      std::string eager_error, compiled_error;
      std::vector<at::Tensor> want, got;
      try {
        want = Flatten(m.forward({x}));
      } catch (const std::exception& e) {
        eager_error = e.what();
      }
      try {
        got = Flatten(c.forward({x}));
      } catch (const std::exception& e) {
        compiled_error = e.what();
      }
      EXPECT_EQ(eager_error.empty(), compiled_error.empty())
          << "eager: " << eager_error.substr(0, 300) << "\ncompiled: " << compiled_error.substr(0, 300);
      if (!eager_error.empty() || !compiled_error.empty()) continue;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i;
        EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << "output " << i;
        // NaN where eager has NaN (a mean over no rows); the rest within tolerance of eager,
        // or as close to the f64 answer as eager is (a layer norm over two close bf16 values
        // is ill-conditioned: eager's rounding of its input moves it as much).
        EXPECT_TRUE(at::equal(got[i].isnan(), want[i].isnan())) << "output " << i;
        const at::Tensor finite = want[i].isfinite();
        if (finite.any().item<bool>()) {
          const at::Tensor exact = Flatten(m.forward({x.to(at::kDouble)}))[i];
          auto error = [&](const at::Tensor& a, const at::Tensor& b) {
            return RelativeError(a.to(at::kDouble).masked_select(finite),
                                 b.to(at::kDouble).masked_select(finite));
          };
          const double to_eager = error(got[i], want[i]);
          const double to_exact = error(got[i], exact), eager_to_exact = error(want[i], exact);
          // Error against f64 in units of the terms' magnitude: computing in f32 and rounding
          // once to the output dtype (its terms read rounded too) stays within two roundings.
          const at::Tensor scale = Flatten(magnitudes.forward({x.to(at::kDouble)}))[i];
          const double scaled = ((got[i].to(at::kDouble) - exact).abs() / scale.clamp_min(1e-30))
                                    .masked_select(finite).max().item<double>();
          const at::ScalarType t = want[i].scalar_type();
          const double rounding = t == at::kBFloat16 ? 0x1p-8 : t == at::kHalf ? 0x1p-11 : 0x1p-20;
          EXPECT_TRUE(to_eager <= Tolerance(want[i].scalar_type()) ||
                      to_exact <= 2 * eager_to_exact || scaled <= 2 * rounding)
              << "output " << i << ": error " << to_eager << " against eager, " << to_exact
              << " against f64 (eager's " << eager_to_exact << "), " << scaled
              << " of the terms' magnitude";
        }
      }
    }
  }
}

// bf16 [65536, 40000]: 2.6e9 elements, 5.2 GB; offsets past 2^31 in elementwise, row and column
// kernels.
TEST_F(BadInputsTest, TensorsOfMoreThanTwoToTheThirtyOneElements) {
  torch::jit::Module m = Define(
      "def forward(self, x):\n"
      "    g = x * 0.5 * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))\n"
      "    return (g, torch.softmax(x, -1), x.float().sum(0))\n");
  CompiledModule c = Compile(m);
  at::Tensor x = Rand({65536, 40000}, at::kBFloat16);
  ASSERT_GT(x.numel(), int64_t{1} << 31);
  std::vector<at::Tensor> got = Flatten(c.forward({x}));
  EXPECT_EQ(c.last_call_stats().torch_ops, 0);
  EXPECT_EQ(c.last_call_stats().fused_launches, 3);
  ASSERT_EQ(got.size(), 3u);
  // Eager's outputs one at a time, compared by slices of rows, to keep the memory in bounds.
  {
    at::Tensor want_g = x * 0.5 * (1.0 + at::tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
    for (int64_t r = 0; r < 65536; r += 8192) {
      EXPECT_LE(RelativeError(got[0].narrow(0, r, 8192), want_g.narrow(0, r, 8192)), 1e-2)
          << "gelu rows " << r;
    }
    // The last rows, whose offsets are the largest, exactly as eager's.
    EXPECT_LE(RelativeError(got[0].narrow(0, 65535, 1), want_g.narrow(0, 65535, 1)), 1e-2);
  }
  got[0] = at::Tensor();
  {
    at::Tensor want_s = at::softmax(x, -1);
    for (int64_t r = 0; r < 65536; r += 8192) {
      EXPECT_LE(RelativeError(got[1].narrow(0, r, 8192), want_s.narrow(0, r, 8192)), 1e-2)
          << "softmax rows " << r;
    }
  }
  got[1] = at::Tensor();
  EXPECT_LE(RelativeError(got[2], x.to(at::kFloat).sum(0)), 1e-5);
}

TEST_F(BadInputsTest, EightThreadsCallingAtOnceGetEagersAnswers) {
  torch::jit::Module shared_model = Define(kGeluSoftmax, 256);
  shared_model.to(at::kCUDA);
  CompiledModule shared = Compile(shared_model);
  std::atomic<int> wrong{0}, raised{0};
  std::vector<std::string> errors(8);
  std::vector<torch::jit::Module> own_models;
  for (int t = 0; t < 8; ++t) own_models.push_back(shared_model.clone());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Half share one module, half compile their own (sharing the process's kernels).
        torch::jit::Module& own_model = own_models[t];
        CompiledModule own = Compile(own_model);
        CompiledModule& c = t % 2 == 0 ? shared : own;
        torch::jit::Module& m = t % 2 == 0 ? shared_model : own_model;
        for (int call = 0; call < 12; ++call) {
          const int64_t rows = 1 + (call * 37 + t * 11) % 300;  // new signatures as it goes
          const at::ScalarType dt = call % 3 == 0 ? at::kBFloat16 : at::kFloat;
          at::Tensor x = Rand({rows, 256}, dt);
          std::vector<at::Tensor> got = Flatten(c.forward({x}));
          std::vector<at::Tensor> want = Flatten(m.forward({x}));
          for (size_t i = 0; i < want.size(); ++i) {
            if (got[i].sizes() != want[i].sizes() ||
                RelativeError(got[i], want[i]) > Tolerance(want[i].scalar_type())) {
              ++wrong;
              errors[t] = absl::StrCat("thread ", t, " call ", call, " output ", i);
            }
          }
        }
      } catch (const std::exception& e) {
        ++raised;
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(raised.load(), 0);
  for (const std::string& e : errors) EXPECT_TRUE(e.empty()) << e;
}

// A kernel that faults (here: an input whose pointer is no memory of the process) is an error
// naming the kernel, with TORCHFUSE_SYNC_LAUNCHES=1; the process does not abort. Run in a
// child process, since a fault leaves the GPU's context unusable to the process.
TEST_F(BadInputsTest, AKernelFaultIsAnErrorNamingTheKernel) {
  auto fault = [] {
    ::setenv("TORCHFUSE_SYNC_LAUNCHES", "1", 1);
    torch::jit::Module m = Define("def forward(self, x):\n    return torch.tanh(x) * 2.0\n");
    CompiledModule c = Compile(m);
    c.forward({Rand({1024, 1024})});  // compiled and run once, on real memory
    at::Tensor bogus = at::for_blob(reinterpret_cast<void*>(uintptr_t{0x10000000}), {1024, 1024})
                           .options(at::TensorOptions().device(at::kCUDA))
                           .target_device(at::Device(at::kCUDA, 0))
                           .make_tensor();
    int code = 3;
    try {
      c.forward({bogus});
      code = 1;  // no error
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const bool named = what.find("failed on the GPU") != std::string::npos &&
                         what.find("kernel tf_") != std::string::npos;
      code = named ? 0 : 2;
      if (!named) std::fprintf(stderr, "message: %s\n", what.c_str());
    }
    std::fflush(stderr);
    std::_Exit(code);  // no static destructors on a context that faulted
  };
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(fault(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace torchfuse
