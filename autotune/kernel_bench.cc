#include "autotune/kernel_bench.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "common/status_macros.h"

namespace torchfuse::autotune {
namespace {


// Compares two output buffers element by element on the device; counts the mismatches.
// kind: 0 f32, 1 f16, 2 bf16, 3 f64, 4 bytes (exact).
constexpr char kCompareBody[] = R"(
extern "C" __global__ void tf_compare_outputs(const unsigned char* a, const unsigned char* b,
                                              long long n, int kind, float atol, float rtol,
                                              unsigned long long* bad) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
    bool ok;
    if (kind == 4) {
      ok = a[i] == b[i];
    } else if (kind == 3) {
      const double x = ((const double*)a)[i], y = ((const double*)b)[i];
      ok = (x != x && y != y) || x == y || fabs(x - y) <= atol + rtol * fabs(y);
    } else {
      float x, y;
      if (kind == 0) {
        x = ((const float*)a)[i];
        y = ((const float*)b)[i];
      } else if (kind == 1) {
        x = tf_half_to_float(((const tf_half*)a)[i]);
        y = tf_half_to_float(((const tf_half*)b)[i]);
      } else {
        x = tf_bf16_to_float(((const tf_bf16*)a)[i]);
        y = tf_bf16_to_float(((const tf_bf16*)b)[i]);
      }
      ok = (x != x && y != y) || x == y || fabsf(x - y) <= atol + rtol * fabsf(y);
    }
    if (!ok) atomicAdd(bad, 1ULL);
  }
}
)";

struct Tolerance {
  int kind;
  float atol, rtol;
};

// Variants may sum in other orders; these bounds are a few roundings of each type.
Tolerance ToleranceOf(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::kF32: return {0, 1e-5f, 1e-4f};
    case graph::DType::kF16: return {1, 1e-3f, 4e-3f};
    case graph::DType::kBF16: return {2, 1e-2f, 2e-2f};
    case graph::DType::kF64: return {3, 1e-12f, 1e-10f};
    case graph::DType::kI64:
    case graph::DType::kI32:
    case graph::DType::kBool: return {4, 0, 0};
  }
  return {4, 0, 0};
}

}  // namespace

const codegen::KernelSource& CompareKernel() {
  static const codegen::KernelSource* k = [] {
    auto* s = new codegen::KernelSource;
    s->name = "tf_compare_outputs";
    s->source = absl::StrCat(codegen::DevicePrelude(), "\n", kCompareBody);
    return s;
  }();
  return *k;
}

KernelBenchmark::KernelBenchmark(std::vector<LaunchCandidate> candidates, BenchSetup setup)
    : candidates_(std::move(candidates)), setup_(std::move(setup)),
      images_(candidates_.size()), kernels_(candidates_.size()) {}

KernelBenchmark::~KernelBenchmark() {
  if (api_ == nullptr) return;
  codegen::ScopedContext context;
  if (context.Enter(setup_.ordinal).ok()) {
    api_->cuStreamSynchronize(setup_.stream);
    for (CUdeviceptr p : allocations_) api_->cuMemFree(p);
  }
}

absl::Status KernelBenchmark::Compile(int i) {
  if (candidates_[i].torch) {
    if (!setup_.run_torch) return absl::FailedPreconditionError("no torch ops to run");
    return absl::OkStatus();
  }
  // Not written to disk: only the chosen variant goes there, when the runner loads it.
  TF_ASSIGN_OR_RETURN(images_[i], codegen::GetOrCompile(candidates_[i].kernel, setup_.arch,
                                                        /*disk=*/nullptr));
  return absl::OkStatus();
}

absl::StatusOr<CUdeviceptr> KernelBenchmark::Alloc(int64_t bytes) {
  CUdeviceptr p = 0;
  TF_CU(api_, cuMemAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
  allocations_.push_back(p);
  return p;
}

absl::Status KernelBenchmark::Prepare() {
  TF_ASSIGN_OR_RETURN(api_, codegen::GetDriverApi());
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(setup_.ordinal));
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (images_[i] == nullptr) continue;
    auto k = codegen::LoadedKernel::Load(*images_[i], candidates_[i].kernel.name, setup_.ordinal,
                                         candidates_[i].kernel.dynamic_smem);
    if (k.ok()) kernels_[i] = std::move(*k);
  }
  if (kernels_[0] == nullptr) return absl::InternalError("the reference variant did not load");
  TF_ASSIGN_OR_RETURN(compare_, codegen::GetOrLoad(CompareKernel(), setup_.ordinal, setup_.disk));
  int64_t touched = 0;  // bytes a run reads and writes
  for (const InputBuffer& in : setup_.inputs) {
    inputs_.push_back(in.address);
    touched += in.span_bytes;
  }
  for (const OutputBuffer& out : setup_.outputs) {
    const int64_t bytes = out.numel * graph::DTypeSize(out.dtype);
    TF_ASSIGN_OR_RETURN(CUdeviceptr r, Alloc(bytes));
    TF_ASSIGN_OR_RETURN(CUdeviceptr c, Alloc(bytes));
    reference_out_.push_back(r);
    candidate_out_.push_back(c);
    touched += bytes;
  }
  // The flush writes twice L2's size: a write of L2's size alone leaves some of the lines it
  // found. Kernels that touch that much themselves leave L2 holding the end of their data when
  // the next run starts at its beginning, and need none; nor does a device too short of memory
  // for the buffer (timing then goes on without it).
  CUdevice dev;
  int l2 = 0;
  TF_CU(api_, cuDeviceGet(&dev, setup_.ordinal));
  TF_CU(api_, cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  const int64_t flush = std::max<int64_t>(2 * int64_t{std::max(l2, 0)}, int64_t{8} << 20);
  if (touched < flush) {
    if (absl::StatusOr<CUdeviceptr> p = Alloc(flush); p.ok()) {
      flush_ = *p;
      flush_bytes_ = static_cast<size_t>(flush);
    }
  }
  for (const ScratchBuffer& b : setup_.scratch) {
    TF_ASSIGN_OR_RETURN(CUdeviceptr p, Alloc(b.bytes));
    if (b.zeroed) {
      TF_CU(api_, cuMemsetD8Async(p, 0, static_cast<size_t>(std::max<int64_t>(b.bytes, 1)),
                                  setup_.stream));
    }
    scratch_.push_back(p);
  }
  TF_ASSIGN_OR_RETURN(mismatches_, Alloc(sizeof(unsigned long long)));
  return absl::OkStatus();
}

absl::Status KernelBenchmark::FlushL2() {
  if (flush_ == 0) return absl::OkStatus();
  TF_CU(api_, cuMemsetD8Async(flush_, 0, flush_bytes_, setup_.stream));
  return absl::OkStatus();
}

absl::Status KernelBenchmark::Launch(int i, const std::vector<CUdeviceptr>& outputs) {
  if (candidates_[i].torch) return setup_.run_torch();
  std::vector<void*> pointers;
  for (uintptr_t a : inputs_) pointers.push_back(reinterpret_cast<void*>(a));
  for (CUdeviceptr o : outputs) pointers.push_back(reinterpret_cast<void*>(o));
  for (CUdeviceptr b : scratch_) pointers.push_back(reinterpret_cast<void*>(b));
  std::vector<void*> args;
  for (void*& p : pointers) args.push_back(&p);
  std::vector<uint8_t> params = setup_.params;
  args.push_back(params.data());
  return kernels_[i]->Launch(candidates_[i].grid, candidates_[i].block, args.data(),
                             setup_.stream);
}

absl::Status KernelBenchmark::RunReference() {
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(setup_.ordinal));
  TF_RETURN_IF_ERROR(Launch(0, reference_out_));
  TF_CU(api_, cuStreamSynchronize(setup_.stream));
  return absl::OkStatus();
}

absl::Status KernelBenchmark::Check(int i) {
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(setup_.ordinal));
  if (candidates_[i].torch) {  // runs, compared with nothing
    TF_RETURN_IF_ERROR(Launch(i, candidate_out_));
    TF_CU(api_, cuStreamSynchronize(setup_.stream));
    return absl::OkStatus();
  }
  if (kernels_[i] == nullptr) return absl::InternalError("did not load");
  TF_RETURN_IF_ERROR(Launch(i, candidate_out_));
  TF_CU(api_, cuMemsetD8Async(mismatches_, 0, sizeof(unsigned long long), setup_.stream));
  for (size_t k = 0; k < setup_.outputs.size(); ++k) {
    const Tolerance tol = ToleranceOf(setup_.outputs[k].dtype);
    long long n = setup_.outputs[k].numel;
    if (tol.kind == 4) n *= graph::DTypeSize(setup_.outputs[k].dtype);
    void* a = reinterpret_cast<void*>(reference_out_[k]);
    void* b = reinterpret_cast<void*>(candidate_out_[k]);
    void* bad = reinterpret_cast<void*>(mismatches_);
    int kind = tol.kind;
    float atol = tol.atol, rtol = tol.rtol;
    void* args[] = {&a, &b, &n, &kind, &atol, &rtol, &bad};
    const unsigned grid = static_cast<unsigned>(std::clamp<long long>((n + 255) / 256, 1, 1024));
    TF_RETURN_IF_ERROR(compare_->Launch(grid, 256, args, setup_.stream));
  }
  unsigned long long bad = 0;
  TF_CU(api_, cuStreamSynchronize(setup_.stream));
  TF_CU(api_, cuMemcpyDtoH(&bad, mismatches_, sizeof(bad)));
  if (bad != 0) return absl::InternalError(absl::StrCat(bad, " outputs differ"));
  return absl::OkStatus();
}

absl::StatusOr<double> KernelBenchmark::TimeMs(int i, int reps) {
  TF_ASSIGN_OR_RETURN(const std::vector<double> ms, TimeRoundsMs({i}, reps));
  return ms[0];
}

absl::StatusOr<std::vector<double>> KernelBenchmark::TimeRoundsMs(const std::vector<int>& which,
                                                                   int rounds) {
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(setup_.ordinal));
  const size_t n = which.size();
  // events[2 * (r * n + k)] and the one after bracket round r's run of which[k].
  std::vector<CUevent> events(2 * n * rounds, nullptr);
  absl::Status status;
  for (CUevent& e : events) {
    if (api_->cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      status = absl::InternalError("cuEventCreate failed");
      break;
    }
  }
  for (size_t k = 0; k < n && status.ok(); ++k) status = Launch(which[k], candidate_out_);
  for (int r = 0; r < rounds && status.ok(); ++r) {
    for (size_t j = 0; j < n && status.ok(); ++j) {
      const size_t k = (j + r) % n;
      status = FlushL2();
      if (!status.ok()) break;
      api_->cuEventRecord(events[2 * (r * n + k)], setup_.stream);
      status = Launch(which[k], candidate_out_);
      api_->cuEventRecord(events[2 * (r * n + k) + 1], setup_.stream);
    }
  }
  std::vector<std::vector<double>> samples(n);
  if (status.ok() && api_->cuStreamSynchronize(setup_.stream) == CUDA_SUCCESS) {
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < n; ++k) {
        float t = 0;
        if (api_->cuEventElapsedTime(&t, events[2 * (r * n + k)], events[2 * (r * n + k) + 1]) ==
            CUDA_SUCCESS) {
          samples[k].push_back(t);
        }
      }
    }
  }
  api_->cuStreamSynchronize(setup_.stream);
  for (CUevent e : events) {
    if (e != nullptr) api_->cuEventDestroy(e);
  }
  TF_RETURN_IF_ERROR(status);
  std::vector<double> medians;
  for (std::vector<double>& s : samples) {
    if (s.empty()) return absl::InternalError("no timing");
    medians.push_back(Median(std::move(s)));
  }
  return medians;
}

double KernelBenchmark::Weight(int i) const {
  return candidates_[i].torch ? setup_.torch_weight : 1.0;
}

}  // namespace torchfuse::autotune
