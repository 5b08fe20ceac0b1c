// Joins what follows a biased matrix product to the product or to the kernel after it.
#ifndef TORCHFUSE_FUSION_FUSE_MATMUL_EPILOGUES_H_
#define TORCHFUSE_FUSION_FUSE_MATMUL_EPILOGUES_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// What follows a biased matrix product (`addmm(b, a, w)`, or `linear(x, w, b)`, with a bias
/// vector of the product's columns) joins the product or the kernel after it:
///
/// - GELU into cuBLASLt's epilogue. A linear layer followed by GELU in its tanh form (GPT-2's
///   MLP, BERT-style MLPs written with the tanh approximation) costs a pass over the product's
///   result for the GELU kernel: one read and one write of the whole activation. cuBLASLt
///   applies bias and GELU to the product's f32 accumulator before its one store (ATen's
///   `_addmm_activation`), so that pass disappears. Taken for an f16/bf16 product whose
///   result (or one reshape of it) is read only by a chain of elementwise ops of it and
///   scalars that computes `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, however it is
///   written (`gelu_tanh`, `pow` or `x*x*x`, the sigmoid form `x sigmoid(1.5957691 (x +
///   0.044715 x^3))`, casts to f32 and back): the chain is evaluated in double precision at
///   points across [-10, 10] and must agree with that function to 1e-6. The product gets the
///   attribute `epilogue="gelu_tanh"`, the chain's result is its result (through the
///   reshape), and the chain's nodes are removed. The GELU then rounds once, from the f32
///   accumulator, where eager rounds the product and each op of the chain, as a fused kernel
///   computes the chain in f32 too. The exact GELU (`erf`) and other curves (quick GELU's `x
///   sigmoid(1.702 x)`) are not this one; f32 products are not taken: on an H100 the f32 MLP
///   with cuBLASLt's GELU epilogues ran 2-3 % slower than with its products and fused GELU
///   kernels.
/// - ReLU into cuBLASLt's epilogue: an f16/bf16 product whose result (or one reshape of it)
///   is read by `relu` alone (OPT's fc1) gets `epilogue="relu"` and the ReLU's readers read
///   it. On an H100 (bench/matmul_epilogues.py) the bf16 product [8192, 768] x [768, 3072]
///   took 0.0657 ms with its bias and ReLU in the epilogue, 0.0630 without bias, 0.0978 with
///   ATen's ReLU after it; in OPT (4096 rows) the kernel of bias and ReLU after the plain
///   product took 14 us a layer. ReLU gives the same bits before or after the product's
///   rounding, and NaN stays NaN through the epilogue. f32 products are left as they are, as
///   for GELU: the f32 [8192, 3072] x [3072, 768] product with the ReLU epilogue was 6 %
///   slower than the plain one.
/// - The bias into the kernel after the product. A biased product read only by elementwise
///   ops (through one reshape that keeps its last dim) becomes the plain product (`matmul`,
///   or `linear` without bias) and an add of the bias to what those ops read, which then
///   joins their kernel: on an H100 the plain product ran 0-6 % faster than cuBLASLt's with
///   the bias epilogue, and the kernel reads a vector more. Inductor does the same.
///
/// Returns whether anything changed.
absl::StatusOr<bool> FuseMatmulEpilogues(graph::Graph* graph);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_FUSE_MATMUL_EPILOGUES_H_
