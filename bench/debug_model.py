"""Compiles one real model with torch.compile(backend=torchfuse) in bf16 under no_grad and prints,
per captured graph, what torchfuse left to torch (explain) and the graph's code.

    PYTHONPATH=build-gpu/python python3 bench/debug_model.py gpt2|llama [--small]
"""
import sys
import warnings

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import models  # noqa: E402


def main():
    name = sys.argv[1]
    torch.manual_seed(0)
    model, make_input = models.MODELS[name]()
    model = model.cuda().eval().to(torch.bfloat16)
    x = make_input()
    from torchfuse._backend import Backend
    be = Backend(keep=True, check=True)
    fast = torch.compile(model, backend=be)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast(x)
        # Once compiled, calls that run the kernels (a lazy first call runs torch ops while
        # they compile): the check compares every call.
        models.settle("torchfuse", fast, x)
        fast(x)
        torch.cuda.synchronize()
    for w in caught:
        print("WARNING:", w.message)
    print("mismatches:", be.mismatches)
    for g, ex in zip(be.graphs, be.example_inputs):
        print(f"==== {g.name}")
        try:
            e = g.explain([torch.empty(t.shape, dtype=t.dtype) for t in ex])
            print({k: v for k, v in e.items() if k != "warning"})
        except Exception as err:  # noqa: BLE001
            print("explain failed:", err)
        print(be.codes[g.name])


if __name__ == "__main__":
    main()
