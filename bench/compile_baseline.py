"""Times eager PyTorch and torch.compile on the same workloads as torchfuse_bench, with CUDA
events (median of repetitions after warm-up), and writes a CSV.

Usage: python3 bench/compile_baseline.py OUT.csv [--reps N]
"""
import argparse
import csv
import time

import torch


def hand_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))


def softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True)[0])
    return e / e.sum(-1, keepdim=True)


def layernorm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def workloads():
    """(name, shape, function of (x, params), parameter count), as torchfuse_bench has them."""
    out = [("gelu 16384x16384", (16384, 16384), lambda x, p: hand_gelu(x), 0)]
    for n in (256, 1024, 4096, 16384):
        out.append((f"softmax 4096x{n}", (4096, n), lambda x, p: softmax(x), 0))
    out.append(("softmax 1024x65536", (1024, 65536), lambda x, p: softmax(x), 0))
    out.append(("bias+gelu 8192x4096", (8192, 4096), lambda x, p: hand_gelu(x + p[0]), 1))
    out.append(("layernorm 8192x4096", (8192, 4096), lambda x, p: layernorm(x, p[0], p[1]), 2))
    out.append(("rmsnorm 8192x4096", (8192, 4096), lambda x, p: rmsnorm(x, p[0]), 1))
    return out


class Fn(torch.nn.Module):
    """A module that calls `fn` on its inputs: a function for torchfuse.compile."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def median_ms(fn, reps):
    """Median over `reps` runs; L2 flushed before each, events read only at the end (the
    protocol of torchfuse_bench, which does not sleep before each run)."""
    flush = torch.empty(64 * 1024 * 1024, device="cuda")
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        # The GPU waits ~0.1 ms more before each run, so the host has enqueued the run's
        # launches before its start event is reached: host overhead up to that long does not
        # count (the flush alone hides ~0.1 ms, less than a slow host's per-call time).
        torch.cuda._sleep(200_000)
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, stops))
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    with torch.no_grad():
        for dtype, dt in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            for name, shape, body, nparams in workloads():
                x = torch.randn(*shape, device="cuda", dtype=dtype)
                params = [torch.randn(shape[-1], device="cuda", dtype=dtype)
                          for _ in range(nparams)]
                fn = (lambda x, body=body, params=params: body(x, params))
                torch._dynamo.reset()
                compiled = torch.compile(fn)
                t0 = time.perf_counter()
                out = compiled(x)
                torch.cuda.synchronize()
                first_call_ms = (time.perf_counter() - t0) * 1e3
                ref = fn(x)
                err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
                eager_ms = median_ms(lambda: fn(x), args.reps)
                compile_ms = median_ms(lambda: compiled(x), args.reps)
                nbytes = x.nbytes + out.nbytes + sum(p.nbytes for p in params)
                rows.append([name, dt, eager_ms, compile_ms, nbytes / (compile_ms * 1e-3) / 1e12,
                             first_call_ms, err])
                print(f"{name:22s} {dt:5s} eager {eager_ms:.4f} ms  torch.compile "
                      f"{compile_ms:.4f} ms  first call {first_call_ms:.0f} ms", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "dtype", "eager_ms", "compile_ms", "compile_tbs",
                    "compile_first_call_ms", "rel_error"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
