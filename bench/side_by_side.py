"""Eager PyTorch, torch.compile and torchfuse side by side, in one process, on the same tensors.

For every workload of BENCH.md (both dtypes; the MLP, whose matrix products decide its time,
has no % copy) it checks each system's output against eager, then measures: kernel time
(median of CUDA-event-timed runs, L2 flushed before each, as bench/compile_baseline.py and
torchfuse_bench do), % of copy bandwidth (bytes read and written
over the time, against a device-to-device copy measured here), cold compile (first call with an
empty cache, in lazy tuning, the default, and in background tuning; torch.compile's with Inductor's on-disk caches in a new empty folder), warm start (first call of a new compiled module over a filled disk cache, with the
process's kernel and tuning tables cleared as in a new process), and the per-call time on a tiny
input (1x1024, where host overhead decides). Writes side_by_side.csv, side_by_side.md and
side_by_side_f32.png / side_by_side_bf16.png into OUT_DIR.

    PYTHONPATH=build/python python3 bench/side_by_side.py OUT_DIR [--reps 50] [--only gelu,...]
"""
import argparse
import csv
import datetime
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Before torch: turns the CUDA driver's compute cache off, so that a cold compile compiles.
from cold_caches import collect_garbage, fresh_inductor_cache  # noqa: E402

import torch  # noqa: E402

from compile_baseline import hand_gelu, median_ms, workloads  # noqa: E402  (the same ones)

import torchfuse  # noqa: E402
from torchfuse import _C  # noqa: E402


class Mlp(torch.nn.Module):
    """BENCH.md's mlp: `layers` x (nn.Linear(width, width) -> hand-written gelu)."""

    def __init__(self, width, layers=4):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, width) for _ in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = hand_gelu(layer(x))
        return x


MLP = ("mlp 4x4096 batch 8192", (8192, 4096))


class Workload(torch.nn.Module):
    """A workload body over its input and its parameters (registered, so FX sees them)."""

    def __init__(self, body, params):
        super().__init__()
        self.body = body
        self.n = len(params)
        for i, p in enumerate(params):
            self.register_parameter(f"p{i}", torch.nn.Parameter(p, requires_grad=False))

    def forward(self, x):
        return self.body(x, [getattr(self, f"p{i}") for i in range(self.n)])


def copy_tbs():
    """Device-to-device copy bandwidth in TB/s (bytes read + written)."""
    src = torch.empty(1 << 28, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 20)
    return 2 * src.nbytes / (ms * 1e-3) / 1e12


def first_call_ms(fn, x):
    torch.cuda.synchronize()
    collect_garbage()
    t0 = time.perf_counter()
    fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def per_call_us(fn, x, calls=2000):
    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def rel_error(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def measure(name, dtype, label, body, nparams, shape, reps, copy):
    """One row. `body` is a workload's function of (x, params), with `nparams` parameters of
    x's row length, or "mlp" for the MLP (no % copy)."""
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    mlp = body == "mlp"
    if mlp:
        model = Mlp(shape[-1]).cuda().to(dtype).eval()
        params = []
    else:
        params = [torch.randn(shape[-1], device="cuda", dtype=dtype) for _ in range(nparams)]
        model = Workload(body, params).eval()
    # The tiny input: 1x1024, or one row where parameters fix the row length.
    tiny_cols = shape[-1] if nparams or mlp else 1024
    tiny = torch.randn(1, tiny_cols, device="cuda", dtype=dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    with torch.no_grad():
        want = model(x)
        # NaN for the MLP: no % copy (has_copy).
        row = {"workload": name, "dtype": label,
               "bytes": float("nan") if mlp else
               x.nbytes + want.nbytes + sum(p.nbytes for p in params)}
        # torch.compile
        torch._dynamo.reset()
        fresh_inductor_cache()
        tc = torch.compile(model)
        row["compile_first_call_ms"] = first_call_ms(tc, x)
        row["compile_err"] = rel_error(tc(x), want)
        # torchfuse: cold (empty cache), then warm (new module, filled cache, fresh tables)
        cache_dir = tempfile.mkdtemp(prefix="torchfuse-bench-")
        try:
            _C.reset_process_caches()
            tf = torchfuse.compile(model, cache_dir=cache_dir)
            row["torchfuse_cold_ms"] = first_call_ms(tf, x)
            # Lazy tuning (the default): the first call ran the group's torch ops while its
            # heuristic's kernel compiled; the compiles finish, and the next call times the
            # candidates.
            torchfuse.wait_for_compiles()
            tf(x)
            # Background tuning, cold: the first call compiles and runs the heuristic's kernel
            # while the other candidates compile; its output is checked like the others'.
            background_dir = tempfile.mkdtemp(prefix="torchfuse-bench-background-")
            try:
                _C.reset_process_caches()
                background = torchfuse.compile(model, cache_dir=background_dir,
                                               tune_mode="background")
                row["torchfuse_background_cold_ms"] = first_call_ms(background, x)
                row["torchfuse_background_err"] = rel_error(background(x), want)
                torchfuse.wait_for_compiles()
                background(x)
                del background
            finally:
                shutil.rmtree(background_dir, ignore_errors=True)
            _C.reset_process_caches()
            before = _C.process_counters()
            tf = torchfuse.compile(model, cache_dir=cache_dir)
            row["torchfuse_warm_ms"] = first_call_ms(tf, x)
            after = _C.process_counters()
            row["warm_nvrtc"] = after["nvrtc_compiles"] - before["nvrtc_compiles"]
            row["warm_tuning"] = after["tuning_runs"] - before["tuning_runs"]
            got = tf(x)
            row["torchfuse_err"] = rel_error(got, want)
            row["torchfuse_kernels"] = tf.stats(last_call=True)["fused_launches"]
            row["torchfuse_variant"] = " ".join(tf.kernel_variants().values())
            row["eager_ms"] = median_ms(lambda: model(x), reps)
            row["compile_ms"] = median_ms(lambda: tc(x), reps)
            row["torchfuse_ms"] = median_ms(lambda: tf(x), reps)
            row["eager_tiny_us"] = per_call_us(model, tiny)
            row["compile_tiny_us"] = per_call_us(tc, tiny)
            row["torchfuse_tiny_us"] = per_call_us(tf, tiny)
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    for system in ("eager", "compile", "torchfuse"):
        row[f"{system}_copy_pct"] = 100 * row["bytes"] / (row[f"{system}_ms"] * 1e-3) / 1e12 / copy
    row["ratio_to_compile"] = row["torchfuse_ms"] / row["compile_ms"]
    row["ok"] = row["torchfuse_err"] <= tol and row["compile_err"] <= tol and \
        row["torchfuse_background_err"] <= tol and \
        row["warm_nvrtc"] == 0 and row["warm_tuning"] == 0
    return row


COLUMNS = ["workload", "dtype", "eager_ms", "compile_ms", "torchfuse_ms", "eager_copy_pct",
           "compile_copy_pct", "torchfuse_copy_pct", "ratio_to_compile", "torchfuse_cold_ms",
           "torchfuse_background_cold_ms", "torchfuse_background_err", "torchfuse_warm_ms", "compile_first_call_ms", "eager_tiny_us", "compile_tiny_us",
           "torchfuse_tiny_us", "torchfuse_kernels", "torchfuse_variant", "warm_nvrtc",
           "warm_tuning", "torchfuse_err", "compile_err", "bytes", "ok"]


def has_copy(r):
    """Whether the row has a % copy (every row but the MLP's)."""
    return not math.isnan(r["bytes"])


def copy_cell(r):
    if not has_copy(r):
        return "-"
    return (f"{r['eager_copy_pct']:.1f} / {r['compile_copy_pct']:.1f} / "
            f"**{r['torchfuse_copy_pct']:.1f}**")


def markdown(rows, device, copy):
    out = [f"{device}, torch {torch.__version__}, copy bandwidth {copy:.3f} TB/s, "
           f"{datetime.date.today().isoformat()}.", "",
           "| workload | dtype | eager ms | torch.compile ms | torchfuse ms | % copy eager / "
           "torch.compile / torchfuse | torchfuse / torch.compile | cold compile ms (torchfuse "
           "/ torchfuse background tuning / torch.compile first call) | warm start ms | 1x1024 per call µs (eager / "
           "torch.compile / torchfuse) | checked |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['workload']} | {r['dtype']} | {r['eager_ms']:.4f} | {r['compile_ms']:.4f} | "
            f"{r['torchfuse_ms']:.4f} | {copy_cell(r)} | {r['ratio_to_compile']:.3f} | "
            f"{r['torchfuse_cold_ms']:.0f} / {r['torchfuse_background_cold_ms']:.0f} / "
            f"{r['compile_first_call_ms']:.0f} | "
            f"{r['torchfuse_warm_ms']:.2f} | {r['eager_tiny_us']:.1f} / "
            f"{r['compile_tiny_us']:.1f} / {r['torchfuse_tiny_us']:.1f} | "
            f"{'ok' if r['ok'] else 'FAILED'} |")
    return "\n".join(out) + "\n"


def plot(rows, out_dir, device):
    from report import plot_side_by_side
    plot_side_by_side([r for r in rows if has_copy(r)], out_dir, device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--only", default="", help="comma-separated workload name prefixes")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    device = torch.cuda.get_device_name(0)
    copy = copy_tbs()
    rows = []
    for dtype, label in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
        for name, shape, body, nparams in workloads() + [MLP + ("mlp", 0)]:
            if args.only and not any(name.startswith(p) for p in args.only.split(",")):
                continue
            r = measure(name, dtype, label, body, nparams, shape, args.reps, copy)
            rows.append(r)
            print(f"{name:22s} {label:4s} eager {r['eager_ms']:.4f} torch.compile "
                  f"{r['compile_ms']:.4f} torchfuse {r['torchfuse_ms']:.4f} ms "
                  f"({r['torchfuse_copy_pct']:.1f}% copy, x{r['ratio_to_compile']:.3f}) "
                  f"cold {r['torchfuse_cold_ms']:.0f} warm {r['torchfuse_warm_ms']:.2f} ms "
                  f"{'ok' if r['ok'] else 'FAILED'}", flush=True)
    with open(os.path.join(args.out_dir, "side_by_side.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in COLUMNS})
    text = markdown(rows, device, copy)
    with open(os.path.join(args.out_dir, "side_by_side.md"), "w") as f:
        f.write(text)
    plot(rows, args.out_dir, device)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
