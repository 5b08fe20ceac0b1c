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


def median_ms(fn, reps):
    """Median over `reps` runs; L2 flushed before each, events read only at the end (the
    same protocol as torchfuse_bench)."""
    flush = torch.empty(64 * 1024 * 1024, device="cuda")
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
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
        for name, shape, has_bias in [("gelu 16384x16384", (16384, 16384), False),
                                      ("bias+gelu 8192x4096", (8192, 4096), True)]:
            for dtype, dt in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
                x = torch.randn(*shape, device="cuda", dtype=dtype)
                b = torch.randn(shape[-1], device="cuda", dtype=dtype)
                fn = (lambda x, b=b: hand_gelu(x + b)) if has_bias else hand_gelu
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
                nbytes = x.nbytes + out.nbytes + (b.nbytes if has_bias else 0)
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
