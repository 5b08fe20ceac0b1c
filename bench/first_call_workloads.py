"""First calls of side-by-side workloads in one process whose imports and lazy initialization
are done (every backend compiled once on another workload first): Dynamo alone (a backend that
returns the captured graph), aot_eager (Dynamo and AOTAutograd), Inductor, and torchfuse with
each tuning mode and an empty cache (lazy, background, sync; with torchfuse's phase totals in
microseconds, threads summed), a warm start over the filled cache with and without Dynamo, and
lazy tuning without Dynamo (FX capture). Milliseconds, f32 and bf16 per workload.
PROF=1 runs torchfuse's lazy first call under cProfile (that figure then includes the
profiler's cost) and prints the profile.

    PYTHONPATH=build-gpu/python python3 bench/first_call_workloads.py ["softmax 4096x1024" ...]
"""
import sys, time, os, cProfile, pstats, io, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import torch
from compile_baseline import workloads
from side_by_side import Workload
import torchfuse
from torchfuse import _C
W = {n: (s, b, k) for n, s, b, k in workloads()}
def first(fn, x):
    torch.cuda.synchronize(); t0 = time.perf_counter(); fn(x); torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3
def dyn_only(gm, ex): return gm.forward
def make(name, dtype, seed):
    shape, body, k = W[name]
    torch.manual_seed(seed)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    ps = [torch.randn(shape[-1], device="cuda", dtype=dtype) for _ in range(k)]
    return Workload(body, ps).eval(), x
names = sys.argv[1:] or ["softmax 4096x1024"]
with torch.no_grad():
    # warm the process: every path once on another workload
    m, x = make("gelu 16384x16384", torch.float16, 0)
    x = x[:64]
    for be in (dyn_only, "aot_eager", "inductor"):
        torch._dynamo.reset(); torch.compile(m, backend=be)(x)
    for mode in ("lazy", "background"):
        torch._dynamo.reset(); torchfuse.compile(m, cache_dir=tempfile.mkdtemp(), tune_mode=mode)(x)
    torchfuse.wait_for_compiles()
    for name in names:
      for dt in (torch.float32, torch.bfloat16):
        res = {}
        m, x = make(name, dt, 1)
        for label, be in (("dynamo", dyn_only), ("aot_eager", "aot_eager"), ("inductor", "inductor")):
            torch._dynamo.reset(); res[label] = first(torch.compile(m, backend=be), x)
        for mode in ("lazy", "background", "sync"):
            torch._dynamo.reset(); _C.reset_process_caches(); d = tempfile.mkdtemp()
            pr = cProfile.Profile()
            f = torchfuse.compile(m, cache_dir=d, tune_mode=mode)
            before = _C.phase_times()
            if os.environ.get("PROF") and mode == "lazy": pr.enable()
            res["tf_" + mode] = first(f, x)
            pr.disable()
            after = _C.phase_times()
            ph = {k: (v[0] - before.get(k, (0, 0))[0]) * 1e3 for k, v in after.items()}
            res["tf_" + mode + "_phases"] = ", ".join(f"{k} {v:.0f}" for k, v in sorted(ph.items(), key=lambda kv: -kv[1])[:8] if v >= 1)
            torchfuse.wait_for_compiles(); f(x)
            if mode == "lazy" and os.environ.get("PROF"):
                s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45); prof = s.getvalue()
            if mode == "background":
                torch._dynamo.reset(); _C.reset_process_caches()
                res["tf_warm"] = first(torchfuse.compile(m, cache_dir=d), x)
                torch._dynamo.reset(); _C.reset_process_caches()
                res["tf_warm_nodynamo"] = first(torchfuse.compile(m, cache_dir=d, dynamo=False), x)
        torch._dynamo.reset(); _C.reset_process_caches()
        res["tf_nodynamo_lazy"] = first(torchfuse.compile(m, cache_dir=tempfile.mkdtemp(), tune_mode="lazy", dynamo=False), x)
        print(name, dt, " ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"\n   {k}: {v}" for k, v in res.items()), flush=True)
if os.environ.get("PROF"): print(prof[:14000])
