#include "codegen_nvrtc/gather_kernel.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen_nvrtc/expr_emitter.h"

namespace torchfuse::codegen {
namespace {

// The CUDA type of indices of `bytes` bytes (int32, int64); `kernel` names the error's kernel.
absl::StatusOr<const char*> IndexType(int bytes, const char* kernel) {
  if (bytes == 8) return "long long";
  if (bytes == 4) return "int";
  return absl::InvalidArgumentError(absl::StrCat(kernel, ": no index of ", bytes, " bytes"));
}

}  // namespace

absl::StatusOr<KernelSource> EmitGatherKernel(int unit_bytes, int index_bytes,
                                              bool negative_from_end) {
  const char* unit = nullptr;
  switch (unit_bytes) {
    case 1: unit = "unsigned char"; break;
    case 2: unit = "unsigned short"; break;
    case 4: unit = "unsigned int"; break;
    case 8: unit = "unsigned long long"; break;
    case 16: unit = "uint4"; break;
    default: return absl::InvalidArgumentError(absl::StrCat("gather: no unit of ", unit_bytes, " bytes"));
  }
  absl::StatusOr<const char*> index = IndexType(index_bytes, "gather");
  if (!index.ok()) return index.status();
  KernelSource out;
  out.block_size = 256;
  out.name = absl::StrCat(negative_from_end ? "tf_index_rows_u" : "tf_gather_u", unit_bytes,
                          "_i", index_bytes * 8);
  out.source = absl::StrReplaceAll(R"(// torchfuse row gather: out[i, :] = table[index[i], :]
extern "C" __global__ void __launch_bounds__(256) NAME(
    const UNIT* __restrict__ table, const INDEX* __restrict__ index, UNIT* __restrict__ out,
    long long n, long long units, long long rows) {
  const long long total = n * units;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long r = i / units;
    const long long c = i - r * units;
    long long t = (long long)__ldg(index + r);
WRAP    if (t < 0 || t >= rows) __trap();  // torch: "index out of range" (a device assert)
    out[i] = table[t * units + c];
  }
}
)",
                                   {{"NAME", out.name},
                                    {"UNIT", unit},
                                    {"INDEX", *index},
                                    {"WRAP", negative_from_end
                                                 ? "    if (t < 0) t += rows;  // as tensor[index]\n"
                                                 : ""}});
  out.hash = Fnv1a(out.source);
  return out;
}

absl::StatusOr<KernelSource> EmitScatterAddKernel(int element_bytes, int index_bytes) {
  const char* element = element_bytes == 4 ? "float" : element_bytes == 8 ? "double" : nullptr;
  if (element == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("scatter-add: no element of ", element_bytes, " bytes"));
  }
  absl::StatusOr<const char*> index = IndexType(index_bytes, "scatter-add");
  if (!index.ok()) return index.status();
  KernelSource out;
  out.block_size = 256;
  out.name = absl::StrCat("tf_scatter_add_f", element_bytes * 8, "_i", index_bytes * 8);
  out.source = absl::StrReplaceAll(R"(// torchfuse row scatter-add: out[index[i], :] += values[i, :]
extern "C" __global__ void __launch_bounds__(256) NAME(
    const INDEX* __restrict__ index, const ELEMENT* __restrict__ values, ELEMENT* out,
    long long n, long long row, long long rows) {
  const long long total = n * row;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const long long r = i / row;
    const long long c = i - r * row;
    long long t = (long long)__ldg(index + r);
    if (t < 0) t += rows;  // torch's indexing counts negative indices from the end
    if (t < 0 || t >= rows) __trap();  // torch: "index out of bounds" (a device assert)
    atomicAdd(out + t * row + c, __ldg(values + i));
  }
}
)",
                                   {{"NAME", out.name}, {"ELEMENT", element}, {"INDEX", *index}});
  out.hash = Fnv1a(out.source);
  return out;
}

}  // namespace torchfuse::codegen
