"""What FuseMatmulEpilogues chooses between, timed on the GPU: a biased product as cuBLASLt runs
it with the bias in its epilogue (`addmm`), the plain product (`mm`, the bias then added by the
kernel after it) and the product with bias and GELU (tanh) in its epilogue
(`_addmm_activation`), in f32 and bf16, for BENCH.md's MLP layer and GPT-2's two MLP products;
and, for a ReLU after the product (OPT's fc1 has GPT-2's shapes), `addmm` followed by ATen's
ReLU kernel against ReLU in the epilogue (`_addmm_activation(..., use_gelu=False)`). The ways
are timed in turn, five rounds; each figure is the median of the rounds' medians
(ms), so that the GPU's clock drifting over the run does not favour one way.

    python3 bench/matmul_epilogues.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import median_ms  # noqa: E402


def main():
    torch.manual_seed(0)
    for dt in (torch.float32, torch.bfloat16):
        for m, k, n in ((8192, 4096, 4096), (8192, 768, 3072), (8192, 3072, 768)):
            x = torch.randn(m, k, device="cuda", dtype=dt)
            w = torch.randn(n, k, device="cuda", dtype=dt) * k ** -0.5
            b = torch.randn(n, device="cuda", dtype=dt)
            ways = {"addmm": lambda: torch.addmm(b, x, w.t()),
                    "mm": lambda: torch.mm(x, w.t()),
                    "addmm_gelu_act": lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True),
                    "addmm_then_relu": lambda: torch.relu_(torch.addmm(b, x, w.t())),
                    "addmm_relu_act": lambda: torch._addmm_activation(b, x, w.t(), use_gelu=False)}
            res = {name: [] for name in ways}
            for _ in range(5):
                for name, f in ways.items():
                    res[name].append(median_ms(f, 20))
            print(dt, (m, k, n), {name: round(sorted(v)[2], 4) for name, v in res.items()},
                  flush=True)


if __name__ == "__main__":
    main()
