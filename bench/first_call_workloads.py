"""First calls of side-by-side workloads in one process whose imports and lazy initialization
are done (every backend compiled once on another workload first): Dynamo alone (a backend that
returns the captured graph), aot_eager (Dynamo and AOTAutograd), Inductor, and torchfuse with
each tuning mode and an empty cache (lazy, background, sync; with torchfuse's phase totals in
microseconds, threads summed), a warm start over the filled cache with and without Dynamo, and
lazy tuning without Dynamo (FX capture). Milliseconds, f32 and bf16 per workload. Each
torch.compile backend's first call has Inductor's on-disk caches in a new empty folder.
PROF=1 runs torchfuse's lazy first call under cProfile (that figure then includes the
profiler's cost) and prints the profile.

    PYTHONPATH=build-gpu/python python3 bench/first_call_workloads.py ["softmax 4096x1024" ...]
"""
import cProfile
import io
import os
import pstats
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_baseline import workloads  # noqa: E402
# side_by_side turns the CUDA driver's compute cache off (CUDA_CACHE_DISABLE) as it is
# imported, before CUDA starts, so that each cold first call compiles its kernels.
from side_by_side import MLP, Mlp, Workload, first_call_ms, fresh_inductor_cache  # noqa: E402

import torchfuse  # noqa: E402
from torchfuse import _C  # noqa: E402

WORKLOADS = {name: (shape, body, nparams) for name, shape, body, nparams in workloads()}
WORKLOADS[MLP[0]] = (MLP[1], "mlp", 0)


def dynamo_only(gm, example_inputs):
    """A backend that runs the graph Dynamo captured as it is."""
    return gm.forward


def make(name, dtype, seed):
    shape, body, nparams = WORKLOADS[name]
    torch.manual_seed(seed)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    if body == "mlp":
        return Mlp(shape[-1]).cuda().to(dtype).eval(), x
    params = [torch.randn(shape[-1], device="cuda", dtype=dtype) for _ in range(nparams)]
    return Workload(body, params).eval(), x


def fresh():
    """As in a new process: no Dynamo cache, no kernel or tuning tables."""
    torch._dynamo.reset()
    _C.reset_process_caches()


def warm_up():
    """Every path once on another workload: imports and lazy initialization."""
    model, x = make("gelu 16384x16384", torch.float16, 0)
    x = x[:64]
    for backend in (dynamo_only, "aot_eager", "inductor"):
        torch._dynamo.reset()
        torch.compile(model, backend=backend)(x)
    for mode in ("lazy", "background"):
        torch._dynamo.reset()
        torchfuse.compile(model, cache_dir=tempfile.mkdtemp(), tune_mode=mode)(x)
    torchfuse.wait_for_compiles()


def measure(name, dtype, profile):
    """The row of one workload and dtype, and the lazy call's profile text (or None)."""
    row, profile_text = {}, None
    model, x = make(name, dtype, 1)
    for label, backend in (("dynamo", dynamo_only), ("aot_eager", "aot_eager"),
                           ("inductor", "inductor")):
        torch._dynamo.reset()
        fresh_inductor_cache()
        row[label] = first_call_ms(torch.compile(model, backend=backend), x)
    for mode in ("lazy", "background", "sync"):
        fresh()
        cache_dir = tempfile.mkdtemp()
        fast = torchfuse.compile(model, cache_dir=cache_dir, tune_mode=mode)
        before = _C.phase_times()
        profiler = cProfile.Profile() if profile and mode == "lazy" else None
        if profiler:
            profiler.enable()
        row["tf_" + mode] = first_call_ms(fast, x)
        if profiler:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
            profile_text = text.getvalue()
        after = _C.phase_times()
        phases = {k: (v[0] - before.get(k, (0, 0))[0]) * 1e3 for k, v in after.items()}
        row["tf_" + mode + "_phases"] = ", ".join(
            f"{k} {us:.0f}" for k, us in sorted(phases.items(), key=lambda kv: -kv[1])[:8]
            if us >= 1)
        torchfuse.wait_for_compiles()
        fast(x)
        if mode == "background":  # its cache is filled: warm starts over it
            fresh()
            row["tf_warm"] = first_call_ms(torchfuse.compile(model, cache_dir=cache_dir), x)
            fresh()
            row["tf_warm_nodynamo"] = first_call_ms(
                torchfuse.compile(model, cache_dir=cache_dir, dynamo=False), x)
    fresh()
    row["tf_nodynamo_lazy"] = first_call_ms(
        torchfuse.compile(model, cache_dir=tempfile.mkdtemp(), tune_mode="lazy", dynamo=False), x)
    return row, profile_text


def main():
    names = sys.argv[1:] or ["softmax 4096x1024"]
    profile = bool(os.environ.get("PROF"))
    profile_text = None
    with torch.no_grad():
        warm_up()
        for name in names:
            for dtype in (torch.float32, torch.bfloat16):
                row, text = measure(name, dtype, profile)
                profile_text = text or profile_text
                print(name, dtype, " ".join(f"{k}={v:.0f}" if isinstance(v, float)
                                            else f"\n   {k}: {v}" for k, v in row.items()),
                      flush=True)
    if profile_text:
        print(profile_text[:14000])


if __name__ == "__main__":
    main()
