"""An embedding's backward as AOTAutograd decomposes it, index_put with accumulate of a
gradient's rows into zeros at their token ids, eager against torchfuse (torchfuse.compile with
FX capture: a copy and the row scatter-add kernel), at two sizes: a tiny model's (4 x 128 ids
into a 1000 x 256 table), where the host's time per call decides, and GPT-2 small's at batch
8 (8 x 1024 ids into 50257 x 768), where the GPU's does. Per size and way: the GPU time (CUDA
events, L2 flushed, median) and the wall time per call of back-to-back calls (median of 5
rounds, as bench/per_call.py measures it); the result's relative error against eager's and
torchfuse's counters.

    PYTHONPATH=build-gpu/python python3 bench/embedding_backward.py
"""
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import median_ms  # noqa: E402
from models import settle  # noqa: E402
from per_call import per_call_us  # noqa: E402
import torchfuse  # noqa: E402


class EmbeddingBackward(torch.nn.Module):
    def forward(self, ids, grad, table):
        return torch.index_put(torch.zeros_like(table), [ids], grad, True)


def main():
    warnings.simplefilter("ignore")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    model = EmbeddingBackward()
    sizes = {"tiny, 4x128 ids into 1000x256": (4, 128, 1000, 256),
             "GPT-2 small, 8x1024 ids into 50257x768": (8, 1024, 50257, 768)}
    with torch.no_grad():
        for name, (batch, length, rows, width) in sizes.items():
            torch.manual_seed(0)
            ids = torch.randint(0, rows, (batch, length), device="cuda")
            grad = torch.randn(batch, length, width, device="cuda")
            table = torch.randn(rows, width, device="cuda")
            want = model(ids, grad, table)
            compiled = torchfuse.compile(model, dynamo=False)
            compiled(ids, grad, table)
            # Checked once compiled: a lazy first call runs torch ops while kernels compile.
            settle("torchfuse", compiled, ids, grad, table)
            got = compiled(ids, grad, table)
            err = ((got - want).norm() / want.norm()).item()
            for label, fn in (("eager", lambda: model(ids, grad, table)),
                              ("torchfuse", lambda: compiled(ids, grad, table))):
                print(f"{name}, {label}: GPU {median_ms(fn, 30) * 1e3:.1f} us, "
                      f"wall per call {per_call_us(fn, 300, rounds=5):.1f} us", flush=True)
            stats = compiled.stats()
            print(f"  error {err:.1e}, scatter_launches {stats.get('scatter_launches')}, "
                  f"torch_ops {stats.get('torch_ops')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
