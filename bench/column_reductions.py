"""Column reductions (the sums of a backward pass) side by side: eager, torch.compile and
torchfuse on the same tensors, with kernel time (L2 flushed, median of CUDA-event-timed
runs) and % of copy bandwidth.

    PYTHONPATH=build/python python3 bench/column_reductions.py [--reps 50]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import Fn, median_ms  # noqa: E402
from side_by_side import copy_tbs  # noqa: E402

import torchfuse  # noqa: E402


def bias_grad(g):
    return g.sum(0)


def norm_grads(g, xhat):
    return (g.float() * xhat.float()).sum((0, 1)).to(g.dtype), g.float().sum((0, 1)).to(g.dtype)


def gelu_bias_grad(g, x):
    d = torch.nn.functional.gelu(x)
    p = g * d
    return p.sum(0), p


WORKLOADS = [
    ("bias grad sum(0) 8192x768", bias_grad, [(8192, 768)]),
    ("bias grad sum(0) 8192x3072", bias_grad, [(8192, 3072)]),
    ("bias grad sum(0) 4096x1024", bias_grad, [(4096, 1024)]),
    ("norm weight+bias grads 8x1024x768", norm_grads, [(8, 1024, 768), (8, 1024, 768)]),
    ("gelu*g stored + sum(0) 8192x3072", gelu_bias_grad, [(8192, 3072), (8192, 3072)]),
]


def kernel_us(fn, reps=20):
    """Summed device time of the kernels one call runs (torch.profiler), without host
    overhead: the figure for inputs too small for event timing to hide the host's share."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total += e.time_range.elapsed_us()
    return total / reps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    copy = copy_tbs()
    print(f"copy bandwidth {copy:.2f} TB/s")
    print("| workload | dtype | eager ms | torch.compile ms | torchfuse ms | torchfuse % copy "
          "| ratio to torch.compile | device µs eager / Inductor / torchfuse |")
    print("|---|---|---|---|---|---|---|---|")
    with torch.no_grad():
        for dtype, dt in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            for name, fn, shapes in WORKLOADS:
                xs = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
                torch._dynamo.reset()
                inductor = torch.compile(fn)
                fused = torchfuse.compile(Fn(fn), tune_mode="sync")
                want = fn(*xs)
                got = fused(*xs)
                want = want if isinstance(want, tuple) else (want,)
                got = got if isinstance(got, tuple) else (got,)
                err = max(((g.double() - w.double()).norm() / w.double().norm()).item()
                          for g, w in zip(got, want))
                e = median_ms(lambda: fn(*xs), args.reps)
                i = median_ms(lambda: inductor(*xs), args.reps)
                t = median_ms(lambda: fused(*xs), args.reps)
                nbytes = sum(x.nbytes for x in xs) + sum(o.nbytes for o in want)
                pct = 100 * nbytes / (t * 1e-3) / 1e12 / copy
                us = [kernel_us(lambda f=f: f(*xs)) for f in (fn, inductor, fused)]
                print(f"| {name} | {dt} | {e:.4f} | {i:.4f} | {t:.4f} | {pct:.1f} | "
                      f"{t / i:.2f} | {us[0]:.1f} / {us[1]:.1f} / {us[2]:.1f} | err {err:.1e}",
                      flush=True)


if __name__ == "__main__":
    main()
